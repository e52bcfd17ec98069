"""The local platform end to end: real SMG in PD mode over emulated groups, real Mooncake HA on real
etcd, real Prometheus with our rules. Nothing here is mocked."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferplane.loadgen import LoadSpec, run_load_sync
from inferplane.local import proc
from inferplane.local.handle import PlatformHandle
from inferplane.local.http import request
from inferplane.spec import REPO_ROOT

from .conftest import start_platform

pytestmark = pytest.mark.integration

PROMPT = "The quick brown fox jumps over the lazy dog and keeps running"


@pytest.fixture(scope="module")
def unified(local_platform: PlatformHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A unified (non-PD) emulator on the platform's release and version: the reference output."""
    g = local_platform.groups("decode")[0]
    port = next(p for p in range(local_platform.state.base_port + 390, local_platform.state.base_port + 400) if proc.port_free(p))
    log = tmp_path_factory.mktemp("unified") / "unified.log"
    argv = [sys.executable, "-m", "inferplane.cli", "emulator", "--role", "unified", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--release", g.release, "--model", g.model, "--engine-version", g.version]
    with open(log, "wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        PlatformHandle.wait_for(lambda: request(url + "/health").ok or child.poll() is not None, 30, "the unified emulator's /health")
        assert child.poll() is None, log.read_text()
        yield url
    finally:
        child.terminate()
        child.wait(10)


def test_state_names_every_part_and_smg_lists_every_group_ready(local_platform: PlatformHandle) -> None:
    state = local_platform.state
    kinds = {p.kind for p in state.processes.values()}
    assert kinds >= {"etcd", "mooncake-master", "s3", "prometheus", "smg", "engine"}
    assert len(state.endpoints.etcd.endpoints) == 3 and len(state.endpoints.mooncake.masters) == 2
    assert state.endpoints.mooncake.master_address.startswith("etcd://")
    workers = {w["url"]: w for w in local_platform.workers()}
    for g in local_platform.groups():
        if g.role in ("prefill", "decode"):
            assert workers[g.url]["worker_type"] == g.role
            assert workers[g.url]["status"] == "ready"
            if g.role == "prefill":
                assert workers[g.url]["bootstrap_port"] == g.bootstrap_port


def test_up_again_changes_nothing(local_platform: PlatformHandle) -> None:
    before = {n: (p.pid, p.starttime) for n, p in local_platform.state.processes.items()}
    local_platform.ensure_up()
    assert {n: (p.pid, p.starttime) for n, p in local_platform.state.processes.items()} == before


def test_pd_through_the_gateway_equals_unified_output(local_platform: PlatformHandle, unified: str) -> None:
    status, pd = local_platform.generate(PROMPT, max_new_tokens=12)
    assert status == 200, pd
    status, ref = local_platform.generate(PROMPT, max_new_tokens=12, url=unified)
    assert status == 200, ref
    assert pd["output_ids"] == ref["output_ids"] and pd["text"] == ref["text"]
    assert pd["meta_info"]["completion_tokens"] == 12
    assert pd["meta_info"]["finish_reason"] == {"type": "length", "length": 12}


def test_every_decode_group_serves_and_load_succeeds(local_platform: PlatformHandle) -> None:
    state = local_platform.state
    spec = LoadSpec(
        url=state.endpoints.gateway.url,
        rate=20,
        duration=2,
        stream=True,
        prompt_tokens=32,
        max_new_tokens=8,
        arrival="uniform",
        gateway_url=state.endpoints.gateway.url,
        gateway_headers=local_platform.admin_headers,
    )
    report = run_load_sync(spec)
    assert report.sent == 40 and report.failed == 0, report.errors
    assert set(report.routed) == {g.url for g in local_platform.groups("decode")}
    assert report.ttft_s["n"] == 40 and report.draining_hit_count == 0


def test_requests_without_bootstrap_fields_are_refused_as_sglang_refuses_them(local_platform: PlatformHandle) -> None:
    for g in (local_platform.groups("prefill")[0], local_platform.groups("decode")[0]):
        status, body = local_platform.generate(PROMPT, url=g.url)
        assert status == 400, (g.name, body)
        assert "bootstrap room" in str(body), body


def test_prometheus_scrapes_sglang_smg_mooncake_and_etcd(local_platform: PlatformHandle) -> None:
    n_engines = len(local_platform.groups())

    def all_up() -> bool:
        ups = local_platform.prom_query("up")
        by_job: dict[str, list[str]] = {}
        for r in ups:
            by_job.setdefault(r["metric"]["job"], []).append(r["value"][1])
        return (
            by_job.get("sglang", []).count("1") == n_engines
            and by_job.get("smg") == ["1"]
            and by_job.get("mooncake-master", []).count("1") == 2
            and by_job.get("etcd", []).count("1") == 3
        )

    local_platform.wait_for(all_up, 30, "every scrape target up")
    local_platform.generate(PROMPT)
    assert local_platform.wait_for(lambda: local_platform.prom_query("sum(sglang:prompt_tokens_total)"), 15, "SGLang counters")
    roles = {r["metric"].get("engine_type") for r in local_platform.prom_query("sglang:num_running_reqs")}
    assert {"prefill", "decode"} <= roles
    assert local_platform.prom_query('smg_worker_health{job="smg"} == 1')
    assert local_platform.prom_query('ha_standby_state{job="mooncake-master"}')
    assert not local_platform.firing() & {"MooncakeMasterDown", "SMGDown", "EtcdMemberDown", "MooncakeNoLeader"}


def test_killing_the_mooncake_leader_fires_the_alert_and_the_standby_takes_over(local_platform: PlatformHandle) -> None:
    leader = local_platform.wait_for(local_platform.mooncake_leader, 30, "a serving Mooncake leader")
    killed = local_platform.state.process(leader)
    local_platform.proc("kill", leader)
    try:
        new = local_platform.wait_for(
            lambda: (lambda m: m if m and m != leader else None)(local_platform.mooncake_leader()), 40, "a new leader"
        )
        assert new != leader
        port = killed.ports["metrics"]

        def alert_for_killed() -> bool:
            return any(
                a["labels"]["alertname"] == "MooncakeMasterDown" and a["labels"]["instance"].endswith(f":{port}")
                for a in local_platform.alerts("firing")
            )

        local_platform.wait_for(alert_for_killed, 40, "MooncakeMasterDown firing in Prometheus")
        # KV now moves through the new leader once the engines' store clients have remounted their
        # segments there (until then puts answer -200, no segment to allocate in): PD requests
        # through the gateway complete again, within the drill's recovery budget.
        last: list[tuple[int, object]] = []

        def pd_request_completes() -> bool:
            last[:] = [local_platform.generate(PROMPT, max_new_tokens=4)]
            return last[0][0] == 200

        try:
            local_platform.wait_for(pd_request_completes, 30, "a PD request through the new leader", interval=1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last answer: {last}") from None
    finally:
        local_platform.proc("start", leader)
    local_platform.wait_for(lambda: len(local_platform.prom_query('up{job="mooncake-master"} == 1')) == 2, 20, "both masters scraped")
    roles = {m.name: (request(m.health_url).json() or {}).get("role") for m in local_platform.state.endpoints.mooncake.masters}
    assert roles == {new: "leader", leader: "standby"}


def test_group_restart_changes_version_at_the_same_url_without_touching_smg(local_platform: PlatformHandle) -> None:
    g = local_platform.groups("decode")[-1]
    worker_id = local_platform.worker(g.url)["id"]  # type: ignore[index]
    try:
        local_platform.group_restart(g.name, version="0.5.24")
        info = request(g.url + "/server_info").json()
        assert info["version"] == "0.5.24"
        assert local_platform.group(g.name).url == g.url and local_platform.group(g.name).version == "0.5.24"
        assert local_platform.worker(g.url)["id"] == worker_id  # type: ignore[index]
        # What a test that failed half-way through an upgrade leaves behind: the group out of SMG.
        request(f"{local_platform.gateway_url}/workers/{worker_id}", "DELETE", headers=local_platform.admin_headers)
        local_platform.wait_for(lambda: local_platform.worker(g.url) is None, 30, f"{g.name} removed from SMG")
    finally:
        local_platform.restore()
    assert local_platform.group(g.name).version == g.version
    assert request(g.url + "/server_info").json()["version"] == g.version
    assert (local_platform.worker(g.url) or {}).get("status") == "ready"


def test_proc_pause_and_resume_an_etcd_member(local_platform: PlatformHandle) -> None:
    local_platform.proc("pause", "etcd-2")
    try:
        status = {p["name"]: p["state"] for p in local_platform.status()["processes"]}
        assert status["etcd-2"] == "paused"
    finally:
        local_platform.proc("resume", "etcd-2")
    local_platform.wait_for(
        lambda: {p["name"]: p["state"] for p in local_platform.status()["processes"]}["etcd-2"] == "healthy", 20, "etcd-2 healthy"
    )


def test_a_taken_port_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    import socket

    from inferplane.local import LocalError, LocalPlatform, load_config
    from inferplane.local.handle import free_base_port
    from inferplane.local.layout import Layout

    cfg = load_config(state_dir=str(tmp_path))
    base = free_base_port(cfg)
    with socket.socket() as s:
        s.bind(("127.0.0.1", Layout.of(cfg, base).etcd_client(0)))
        s.listen()
        with pytest.raises(LocalError) as exc:
            LocalPlatform(cfg, base_port=base).up()
    msg = str(exc.value)
    assert "\n" not in msg and f"port {base}" in msg and "etcd-0" in msg and "--base-port" in msg
    assert proc.tagged(tmp_path.resolve()) == []


def test_down_leaves_no_process_of_ours(tmp_path: Path) -> None:
    handle = start_platform(tmp_path, groups={"prefill": 1, "decode": 1, "encoder": 1})
    try:
        state = handle.state
        pids = [p.pid for p in state.processes.values() if p.pid]
        assert len(pids) == len(state.processes)
        # Every process carries the state dir tag in its environment, except SMG, which overwrites
        # its argv and environment with a title ("smg::router"): it is tracked by PID and start time.
        untagged = {p.name for p in state.processes.values() if p.pid not in proc.tagged(handle.state_dir)}
        assert untagged <= {"smg"}
        stopped = handle.platform.down()
    finally:
        handle.platform.down()
    assert sorted(stopped) == sorted(state.processes)
    time.sleep(0.2)
    assert not [pid for pid in pids if proc.running(pid)]
    assert proc.tagged(handle.state_dir) == []
    # Also by command line: nothing mentions the state dir any more.
    mentions = [
        e.name for e in Path("/proc").iterdir() if e.name.isdigit() and str(handle.state_dir) in " ".join(proc.cmdline(int(e.name)))
    ]
    assert mentions == []
    assert handle.platform.down() == []  # a second down has nothing left to stop
