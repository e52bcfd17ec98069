"""Ordered worker upgrade (playbooks/upgrade-worker.yml) on a local platform started here.

- Wall time of the rollout against its critical path: the sum over groups of drain + recreate +
  verification (golden and KV test), taken from the run's own evidence. The ratio is what the
  runbook's bookkeeping costs (capacity checks, gateway calls, waiting out drain_settle_secs,
  Ansible itself) on top of the work that cannot be skipped.
- Serving capacity during the rollout: groups ready on the gateway per role, sampled every 0.25 s,
  never below (N-1)/N of the role's groups.
- Request latency under steady load while the groups roll, against the same load on the same
  platform before the rollout, side by side.

`--quick` rolls the decode pool only.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from inferplane.loadgen import LoadSpec, run_load_sync
from inferplane.local import LocalPlatform, load_config
from inferplane.local.handle import PlatformHandle, free_base_port
from inferplane.local.http import get_json

# The playbook runner and release helpers the integration tests use (`python -m benchmarks` runs
# from the repository root, where `tests` is importable).
from tests.integration.rollout_support import evidence, patch_release, run_playbook, settle_store

CRITICAL = ("drain", "recreate", "verify", "kv_transfer")


def _load(handle: PlatformHandle, stop: threading.Event | None, duration: float) -> LoadSpec:
    return LoadSpec(
        url=handle.gateway_url,
        rate=6,
        duration=duration,
        prompt_tokens=32,
        max_new_tokens=8,
        arrival="uniform",
        timeout_s=60,
        gateway_url=handle.gateway_url,
        gateway_metrics_url=handle.gateway_metrics_url,
        gateway_headers=handle.admin_headers,
        stop=stop,
    )


class CapacityWatch:
    """Groups ready on the gateway, per role, over time."""

    def __init__(self, handle: PlatformHandle) -> None:
        self.handle = handle
        self.roles = {g.url: g.role for g in handle.groups()}
        self.minimum: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            body = get_json(self.handle.gateway_url + "/workers", headers=self.handle.admin_headers, timeout=3) or {}
            ready: dict[str, int] = {r: 0 for r in set(self.roles.values())}
            for w in body.get("workers", []):
                if w.get("status") == "ready" and w.get("url") in self.roles:
                    ready[self.roles[w["url"]]] += 1
            for role, n in ready.items():
                self.minimum[role] = min(self.minimum.get(role, n), n)
            self.samples += 1
            self._stop.wait(0.25)

    def __enter__(self) -> CapacityWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _ms(stats: dict[str, float | None], key: str) -> float:
    return round((stats.get(key) or 0.0) * 1000, 1)


def run(quick: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    cfg = load_config(state_dir=str(work / "platform"))
    platform = LocalPlatform(cfg, base_port=free_base_port(cfg))
    try:
        platform.up()
        handle = PlatformHandle(platform)
        settle_store(handle)
        pools = "decode" if quick else "prefill,decode"
        target = patch_release(work)
        before = run_load_sync(_load(handle, None, 20))

        stop = threading.Event()
        during: dict[str, Any] = {}
        loader = threading.Thread(target=lambda: during.update(r=run_load_sync(_load(handle, stop, 3600))), daemon=True)
        extravars = {
            "inferplane_local_state_dir": str(handle.state_dir),
            "pool": pools,
            "release": str(target),
            "upgrade_evidence_dir": str(work / "evidence"),
            "upgrade_golden_dir": str(work / "golden"),
            "longest_request_s": 2,
            "upgrade_drain_settle_s": 1,
            "upgrade_verify_window_s": 1,
        }
        with CapacityWatch(handle) as capacity:
            loader.start()
            time.sleep(2)
            t0 = time.monotonic()
            result = run_playbook("upgrade-worker.yml", extravars, work)
            wall = time.monotonic() - t0
            stop.set()
            loader.join(120)
        if result.rc != 0:
            raise SystemExit(f"the rollout failed: {result.final_failure}")
        summary, records = evidence(work / "evidence")
        rows: list[dict[str, Any]] = []
        critical = 0.0
        for name in summary["order"]:
            steps = {s["name"]: s["duration_s"] for s in records[name]["steps"]}
            crit = sum(steps.get(s, 0.0) for s in CRITICAL)
            critical += crit
            rows.append(
                {
                    "group": name,
                    "gateway_remove s": round(steps["gateway_remove"], 1),
                    "drain s": round(steps["drain"], 1),
                    "recreate s": round(steps["recreate"], 1),
                    "verify+KV s": round(steps["verify"] + steps["kv_transfer"], 1),
                    "gateway_add s": round(steps["gateway_add"], 1),
                    "group total s": round(records[name]["ended"] - records[name]["started"], 1),
                }
            )
        load = during["r"]
        groups = {r: len(handle.groups(r)) for r in ("prefill", "decode")}
        floor = {r: f"{capacity.minimum.get(r, 0)}/{n} (floor {n - 1}/{n})" for r, n in groups.items()}
        rows.append(
            {
                "group": "rollout",
                "gateway_remove s": "",
                "drain s": "",
                "recreate s": "",
                "verify+KV s": f"critical path {critical:.1f}",
                "gateway_add s": "",
                "group total s": f"wall {wall:.1f} ({wall / critical:.2f}x critical)",
            }
        )
        notes = (
            f"Pools {pools}: {len(summary['order'])} groups, one at a time. Wall {wall:.1f} s against a critical path (drain + recreate + "
            f"verify + KV test, summed over groups) of {critical:.1f} s: {wall / critical:.2f}x. "
            f"Fewest groups ready on the gateway while rolling: {', '.join(f'{r} {v}' for r, v in floor.items())}, "
            f"{capacity.samples} samples. Load at 6 req/s during the rollout: {load.sent} sent, {load.failed} failed, "
            f"{load.draining_hit_count} sent to a draining group; E2E p50/p99 {_ms(load.e2e_s, 'p50')}/{_ms(load.e2e_s, 'p99')} ms "
            f"against {_ms(before.e2e_s, 'p50')}/{_ms(before.e2e_s, 'p99')} ms before the rollout "
            f"({(load.e2e_s.get('p50') or 0) / max(before.e2e_s.get('p50') or 1e-9, 1e-9):.2f}x p50). "
            f"drain_settle_secs 2 s and a 1 s settle window (local); the emulated engines restart in seconds, real ones load "
            f"weights for minutes, so recreate dominates the critical path in production."
        )
        (work / "evidence.json").write_text(json.dumps({"summary": summary, "records": records}, indent=2))
        return {"title": "Ordered worker upgrade: wall time vs critical path, capacity, latency", "rows": rows, "notes": notes}
    finally:
        platform.down()
        shutil.rmtree(work, ignore_errors=True)
