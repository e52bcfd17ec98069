"""playbooks/switch-model.yml (blue/green) against the local platform, under load through the front.

The switch moves the platform to another model revision and SGLang minor, a change an in-place
rollout refuses. A watcher polls every gateway the whole time: no gateway may ever list prefill and
decode workers of different versions as ready together (SMG would pair them).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.loadgen import LoadSpec, run_load_sync
from inferplane.local.handle import PlatformHandle
from inferplane.local.http import get_json, request

from .rollout_support import BASE_RELEASE, evidence, restore, run_playbook, versions, write_release

pytestmark = pytest.mark.integration

PHASES = ["set_up", "verify_set", "canary", "switch", "drain_canonical", "rebuild_canonical", "switch_back", "drain_set", "remove_set"]
NEW_REVISION = "9a" * 20


class MixedPairWatcher:
    """Polls every gateway's ready workers and each one's own /server_info version."""

    def __init__(self, handle: PlatformHandle, interval: float = 0.3) -> None:
        self.handle = handle
        self.interval = interval
        self.polls = 0
        self.mixed: list[dict[str, Any]] = []
        self.seen: set[tuple[str, str]] = set()  # (gateway, version) pairs observed serving
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            state = self.handle.state
            gateways = {"smg": state.endpoints.gateway} | dict(state.endpoints.gateways)
            for name, gw in gateways.items():
                headers = {"Authorization": f"Bearer {gw.admin_key}"} if gw.admin_key else {}
                body = get_json(gw.url + "/workers", headers=headers, timeout=3) or {}
                ready = [w for w in body.get("workers", []) if w.get("status") == "ready"]
                by_type: dict[str, set[str]] = {"prefill": set(), "decode": set()}
                for w in ready:
                    info = get_json(w["url"] + "/server_info", timeout=3)
                    if info and w.get("worker_type") in by_type:
                        by_type[w["worker_type"]].add(str(info.get("version")))
                if by_type["prefill"] and by_type["decode"]:
                    found = by_type["prefill"] | by_type["decode"]
                    self.seen |= {(name, v) for v in found}
                    if len(found) > 1:
                        self.mixed.append({"gateway": name, "prefill": sorted(by_type["prefill"]), "decode": sorted(by_type["decode"])})
            self.polls += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> MixedPairWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def platform(local_platform: PlatformHandle) -> Iterator[PlatformHandle]:
    restore(local_platform)
    yield local_platform
    restore(local_platform)


def test_blue_green_switch_under_load_never_serves_a_mixed_pair(platform: PlatformHandle, tmp_path: Path) -> None:
    image = yaml.safe_load(BASE_RELEASE.read_text())["runtime"]["sglang_image"].split("@")[0]
    target = write_release(
        tmp_path,
        "next-model",
        {
            "release": "local-2027.01.0",
            "runtime.sglang_version": "0.6.0",
            "runtime.sglang_image": f"{image}@sha256:{'cd' * 32}",
            "models.emu-tiny.revision": NEW_REVISION,
        },
    )
    golden_dir = tmp_path / "golden"
    stop = threading.Event()
    spec = LoadSpec(
        url=platform.front_url, rate=6, duration=900, prompt_tokens=32, max_new_tokens=8, arrival="uniform", timeout_s=60, stop=stop
    )
    report: dict[str, Any] = {}
    loader = threading.Thread(target=lambda: report.update(r=run_load_sync(spec)), daemon=True)
    extravars = {
        "inferplane_local_state_dir": str(platform.state_dir),
        "release": str(target),
        "canary_percent": 30,
        "canary_s": 3,
        "longest_request_s": 2,
        "upgrade_drain_settle_s": 1,
        "upgrade_evidence_dir": str(tmp_path / "evidence"),
        "upgrade_golden_dir": str(golden_dir),
    }
    with MixedPairWatcher(platform) as watcher:
        loader.start()
        try:
            time.sleep(2)
            run = run_playbook("switch-model.yml", extravars, tmp_path)
            time.sleep(2)
        finally:
            stop.set()
            loader.join(120)
    assert run.rc == 0, run.failures

    load = report["r"]
    assert load.sent > 50 and load.failed == 0, load.errors
    blue_decodes = {g.url for g in platform.groups("decode")}
    assert blue_decodes <= set(load.routed) and set(load.routed) - blue_decodes, "the load never went through the set"
    assert watcher.polls > 20 and watcher.mixed == [], watcher.mixed
    assert {("smg", "0.5.23"), ("smg", "0.6.0"), ("green", "0.6.0")} <= watcher.seen

    # Back on the platform's own gateway and groups, every one on the target; the set is gone.
    assert versions(platform) == {"prefill-0": "0.6.0", "prefill-1": "0.6.0", "decode-0": "0.6.0", "decode-1": "0.6.0"}
    state = platform.state
    assert state.endpoints.gateways == {} and state.endpoints.front is not None and state.endpoints.front.weights == {"smg": 100}
    assert {w["status"] for w in platform.workers()} == {"ready"} and len(platform.workers()) == 4

    _, records = evidence(tmp_path / "evidence")
    record = records["switch-green"]
    assert record["result"] == "ok" and [s["name"] for s in record["steps"]] == PHASES

    # The front now answers with the new revision's output (recorded from the set, compared since).
    baseline = json.loads((golden_dir / f"emu-tiny-{NEW_REVISION}.json").read_text())
    prompt = baseline["prompts"]["short"]
    answer = request(
        platform.front_url + "/generate",
        "POST",
        {"text": prompt["text"], "sampling_params": {"max_new_tokens": prompt["max_new_tokens"], "temperature": 0}},
    ).json()
    assert answer["output_ids"] == prompt["expected"]["output_ids"]
