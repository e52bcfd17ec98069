"""playbooks/upgrade-worker.yml against the local platform: real SMG, real Mooncake, emulated engines.

Every test drives the real playbook with ansible-runner and checks the platform afterwards. Windows
are shortened through extra vars (drain_settle_secs 2 s, settle 1 s); nothing else differs from a
production run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplane.loadgen import LoadSpec, run_load_sync
from inferplane.local.handle import PlatformHandle
from inferplane.local.http import request

from .rollout_support import evidence, patch_release, restore, run_playbook, settle_store, versions, worker_status, write_release

pytestmark = pytest.mark.integration

STEPS = ["capacity", "gateway_remove", "drain", "recreate", "warmup", "verify", "kv_transfer", "gateway_add"]


@pytest.fixture(scope="module")
def platform(local_platform: PlatformHandle) -> PlatformHandle:
    restore(local_platform)
    return local_platform


@pytest.fixture(scope="module")
def golden_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("golden")


@pytest.fixture(autouse=True)
def put_back(platform: PlatformHandle) -> Iterator[None]:
    yield
    restore(platform)


def upgrade_vars(handle: PlatformHandle, workdir: Path, golden_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "inferplane_local_state_dir": str(handle.state_dir),
        "upgrade_evidence_dir": str(workdir / "evidence"),
        "upgrade_golden_dir": str(golden_dir),
        "longest_request_s": 2,
        "upgrade_drain_settle_s": 1,
        "upgrade_verify_window_s": 1,
        **extra,
    }


def worker_ids(handle: PlatformHandle) -> dict[str, str]:
    return {w["url"]: w["id"] for w in handle.workers()}


def test_check_mode_prints_the_plan_and_changes_nothing(platform: PlatformHandle, tmp_path: Path, golden_dir: Path) -> None:
    target = patch_release(tmp_path)
    before = (versions(platform), worker_ids(platform))
    run = run_playbook(
        "upgrade-worker.yml", upgrade_vars(platform, tmp_path, golden_dir, pool="prefill,decode", release=str(target)), tmp_path, check=True
    )
    assert run.rc == 0, run.failures
    order = [line for line in run.stdout.splitlines() if "0.5.23 -> 0.5.24" in line]
    assert [line.strip(" -'").split(":")[0] for line in order] == ["prefill-1", "prefill-0", "decode-1", "decode-0"]
    assert "Check mode: nothing changes." in run.stdout
    assert (versions(platform), worker_ids(platform)) == before


def test_a_pd_incompatible_target_is_refused_before_anything_changes(platform: PlatformHandle, tmp_path: Path, golden_dir: Path) -> None:
    target = write_release(tmp_path, "new-abi", {"release": "local-new-abi", "runtime.mooncake_te_abi": "te-0.4.0"})
    before = (versions(platform), worker_ids(platform))
    run = run_playbook("upgrade-worker.yml", upgrade_vars(platform, tmp_path, golden_dir, pool="decode", release=str(target)), tmp_path)
    assert run.rc != 0
    assert "Refused before touching anything" in run.final_failure
    assert "Mooncake transfer-engine ABI" in run.final_failure and "switch-model.yml" in run.final_failure
    assert (versions(platform), worker_ids(platform)) == before
    assert not (tmp_path / "evidence").exists() or not any((tmp_path / "evidence").rglob("decode-*.json"))


def test_every_group_is_upgraded_under_load_without_a_failed_or_misrouted_request(
    platform: PlatformHandle, tmp_path: Path, golden_dir: Path
) -> None:
    target = patch_release(tmp_path)
    stop = threading.Event()
    spec = LoadSpec(
        url=platform.gateway_url,
        rate=6,
        duration=900,
        prompt_tokens=32,
        max_new_tokens=8,
        arrival="uniform",
        timeout_s=60,
        gateway_url=platform.gateway_url,
        gateway_metrics_url=platform.gateway_metrics_url,
        gateway_headers=platform.admin_headers,
        stop=stop,
    )
    report: dict[str, Any] = {}
    loader = threading.Thread(target=lambda: report.update(r=run_load_sync(spec)), daemon=True)
    loader.start()
    try:
        time.sleep(2)  # steady load before the first group leaves
        run = run_playbook(
            "upgrade-worker.yml", upgrade_vars(platform, tmp_path, golden_dir, pool="prefill,decode", release=str(target)), tmp_path
        )
        time.sleep(2)  # and after the last one is back
    finally:
        stop.set()
        loader.join(120)
    assert run.rc == 0, run.failures
    load = report["r"]
    assert load.sent > 50 and load.failed == 0, load.errors
    assert load.draining_observed, "the load generator never saw a group draining"
    assert load.draining_hit_count == 0, (load.draining_hits, load.draining_gateway_counts)

    assert set(versions(platform).values()) == {"0.5.24"}
    assert set(worker_status(platform).values()) == {"ready"} and len(worker_status(platform)) == 4

    summary, records = evidence(tmp_path / "evidence")
    order = ["prefill-1", "prefill-0", "decode-1", "decode-0"]
    assert summary["order"] == order
    assert [r["group"] for r in summary["results"]] == order and {r["result"] for r in summary["results"]} == {"ok"}
    previous_end = 0.0
    for name in order:
        record = records[name]
        assert record["result"] == "ok" and record["to"]["sglang_version"] == "0.5.24"
        assert [s["name"] for s in record["steps"]] == STEPS
        assert all(s["result"] == "ok" and s["start"] <= s["end"] for s in record["steps"])
        # One group at a time: each starts after the previous one finished.
        assert record["started"] >= previous_end
        previous_end = record["ended"]


def test_a_version_that_fails_health_stops_the_rollout_at_that_group(platform: PlatformHandle, tmp_path: Path, golden_dir: Path) -> None:
    target = patch_release(tmp_path)
    broken = {"INFERPLANE_EMULATOR_FAULTS": json.dumps({"unhealthy": True})}
    run = run_playbook(
        "upgrade-worker.yml",
        upgrade_vars(
            platform,
            tmp_path,
            golden_dir,
            pool="decode",
            release=str(target),
            upgrade_local_engine_environment=broken,
            upgrade_ready_timeout_s=6,
        ),
        tmp_path,
    )
    assert run.rc != 0
    assert "Rollout stopped at step recreate of decode-1" in run.final_failure, run.final_failure
    assert "decode-1 is out of traffic" in run.final_failure and "Next:" in run.final_failure
    assert platform.group("decode-1").url not in worker_status(platform)
    assert versions(platform) == {"prefill-0": "0.5.23", "prefill-1": "0.5.23", "decode-0": "0.5.23", "decode-1": "0.5.24"}
    assert worker_status(platform)[platform.group("decode-0").url] == "ready"
    _, records = evidence(tmp_path / "evidence")
    assert records["decode-1"]["failed_step"] == "recreate" and "decode-0" not in records


def test_different_golden_output_stops_the_rollout(platform: PlatformHandle, tmp_path: Path, golden_dir: Path) -> None:
    target = patch_release(tmp_path)
    stale_weights = {"INFERPLANE_EMULATOR_FAULTS": json.dumps({"wrong_revision": "0" * 40})}
    run = run_playbook(
        "upgrade-worker.yml",
        upgrade_vars(platform, tmp_path, golden_dir, pool="prefill", release=str(target), upgrade_local_engine_environment=stale_weights),
        tmp_path,
    )
    assert run.rc != 0
    assert "Rollout stopped at step verify of prefill-1" in run.final_failure, run.final_failure
    assert "differs from the baseline" in run.final_failure
    assert platform.group("prefill-1").url not in worker_status(platform)
    assert versions(platform)["prefill-0"] == "0.5.23" and worker_status(platform)[platform.group("prefill-0").url] == "ready"


def test_a_kv_transfer_failing_for_one_peer_pair_stops_the_rollout(platform: PlatformHandle, tmp_path: Path, golden_dir: Path) -> None:
    target = patch_release(tmp_path)
    # decode-1 cannot take KV: prefill-1 passes its golden prompts (paired with decode-0) and must
    # fail the pairwise KV test on exactly the pair with decode-1.
    platform.faults("decode-1", kv_transfer_fail=True)
    run = run_playbook("upgrade-worker.yml", upgrade_vars(platform, tmp_path, golden_dir, pool="prefill", release=str(target)), tmp_path)
    assert run.rc != 0
    assert "Rollout stopped at step kv_transfer of prefill-1" in run.final_failure, run.final_failure
    assert "prefill-1->decode-1" in run.final_failure and "prefill-1->decode-0" not in run.final_failure
    assert platform.group("prefill-1").url not in worker_status(platform)
    assert versions(platform)["prefill-0"] == "0.5.23"


def test_a_drain_past_its_deadline_stops_and_a_second_rollout_of_the_pool_is_refused(
    platform: PlatformHandle, tmp_path: Path, golden_dir: Path
) -> None:
    target = patch_release(tmp_path)
    prefill, decode = platform.group("prefill-0"), platform.group("decode-1")
    # A long answer pinned to decode-1 (as SMG would send it): still running at the drain deadline.
    long_body = {
        "text": "a long answer",
        "sampling_params": {"max_new_tokens": 30000, "temperature": 0, "ignore_eos": True},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": prefill.bootstrap_port,
        "bootstrap_room": 4242,
    }
    answers: dict[str, int] = {}
    pinned = [
        threading.Thread(target=lambda u=u, k=k: answers.update({k: request(u + "/generate", "POST", long_body, timeout=120).status}))
        for k, u in (("prefill", prefill.url), ("decode", decode.url))
    ]
    for t in pinned:
        t.start()
    platform.wait_for(lambda: _running(decode.url) > 0, 20, "the long request running")

    first: dict[str, Any] = {}
    first_dir = tmp_path / "first"
    first_dir.mkdir()
    runner = threading.Thread(
        target=lambda: first.update(
            run=run_playbook(
                "upgrade-worker.yml",
                upgrade_vars(platform, first_dir, golden_dir, pool="decode", group="decode-1", release=str(target), drain_timeout_s=8),
                first_dir,
            )
        )
    )
    runner.start()
    lease = Path(platform.state_dir) / "locks" / "rollout-decode.json"
    platform.wait_for(lambda: lease.is_file(), 60, "the first rollout's lease")
    second = run_playbook("upgrade-worker.yml", upgrade_vars(platform, tmp_path, golden_dir, pool="decode", release=str(target)), tmp_path)
    runner.join(180)
    still_running = _running(decode.url)
    request(decode.url + "/abort_request", "POST", {"abort_all": True})
    for t in pinned:
        t.join(60)

    assert second.rc != 0
    assert "refused: pool decode is being changed by" in second.final_failure, second.final_failure
    assert "Nothing was changed" in second.final_failure
    assert not (tmp_path / "evidence").exists() or not any((tmp_path / "evidence").rglob("decode-*.json"))

    run = first["run"]
    assert run.rc != 0
    assert "Rollout stopped at step drain of decode-1" in run.final_failure, run.final_failure
    assert "drain deadline" in run.final_failure and "nothing was stopped" in run.final_failure
    assert versions(platform)["decode-1"] == "0.5.23"  # never recreated
    assert worker_status(platform).get(decode.url) in (None, "draining")  # out of traffic
    assert still_running > 0  # the deadline stopped the rollout, not the request
    assert answers["prefill"] == 200
    assert not lease.exists()  # released after the stop
    settle_store(platform)


def _running(url: str) -> float:
    for line in request(url + "/metrics").text.splitlines():
        if line.startswith("sglang:num_running_reqs"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
