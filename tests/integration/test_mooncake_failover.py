"""playbooks/mooncake-failover.yml against the local platform: real etcd, real mooncake_master in HA
with oplog, a real Mooncake store client. Each test leaves 2 masters and 3 etcd members healthy.

The drills' own assertions live in the playbook (roles/mooncake_drill/tasks/verify.yml); these
tests run it as an operator would and check the evidence it writes, so a drill that stops
checking something fails here too.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from inferplane.local.handle import PlatformHandle
from inferplane.node import mooncake_ha as ha

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "mooncake-failover.yml"
BIN = Path(sys.executable).parent  # the venv's ansible-playbook and inferplane
KEY_LOSS_CHECK = "seed keys lost"


class Run:
    def __init__(self, result: Any, reports: Path) -> None:
        self.rc = result.rc
        self.reports = reports
        self.stdout = result.stdout.read()

    def evidence(self, drill: str) -> dict[str, Any]:
        found = sorted(self.reports.glob(f"drill-{drill}-*/evidence.json"))
        assert found, f"no evidence for {drill} under {self.reports}:\n{self.stdout[-3000:]}"
        return json.loads(found[-1].read_text())

    def failed_checks(self, evidence: dict[str, Any]) -> list[str]:
        return [c["name"] for c in evidence["checks"] if not c["ok"]]


def playbook(platform: PlatformHandle, tmp: Path, **extravars: Any) -> Run:
    reports = tmp / "reports"
    (tmp / "runner").mkdir(parents=True, exist_ok=True)
    result = ansible_runner.run(
        private_data_dir=str(tmp / "runner"),
        project_dir=str(REPO),
        playbook=str(PLAYBOOK),
        inventory=str(REPO / "inventories" / "local" / "hosts.yml"),
        extravars={
            "inferplane_local_state_dir": str(platform.state_dir),
            "mooncake_diagnose_reports_dir": str(reports),
            "mooncake_drill_reports_dir": str(reports),
            "mooncake_recovery_reports_dir": str(reports),
            **extravars,
        },
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        quiet=True,
    )
    return Run(result, reports)


def diagnosis(platform: PlatformHandle) -> dict[str, Any]:
    state = platform.state
    mc = state.endpoints.mooncake
    masters = [m.model_dump() for m in mc.masters]
    return ha.assess(ha.snapshot(state.endpoints.etcd.endpoints, masters, mc.cluster_id))


@pytest.fixture(autouse=True)
def venv_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-runner finds ansible-playbook on this process's PATH (`make` puts the venv there; a bare pytest may not)."""
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', '')}")


@pytest.fixture
def healthy(local_platform: PlatformHandle) -> Iterator[PlatformHandle]:
    """Every test starts from, and must leave, two masters and three etcd members, healthy."""
    local_platform.wait_for(lambda: diagnosis(local_platform)["verdict"] == "healthy", 60, "Mooncake healthy before the test")
    yield local_platform
    try:
        local_platform.wait_for(lambda: diagnosis(local_platform)["verdict"] == "healthy", 60, "Mooncake healthy after the test")
    except Exception:
        local_platform.restore()
        raise


def test_diagnose_reports_a_healthy_leader(healthy: PlatformHandle, tmp_path: Path) -> None:
    run = playbook(healthy, tmp_path)
    assert run.rc == 0, run.stdout[-3000:]
    report = json.loads(sorted((tmp_path / "reports").glob("diagnose-*.json"))[-1].read_text())
    assert report["verdict"] == "healthy"
    assert report["assessment"]["leader"] == healthy.mooncake_leader()
    assert report["assessment"]["etcd"] == {**report["assessment"]["etcd"], "members": 3, "answering": 3, "quorum": True}
    assert (tmp_path / "reports").glob("diagnose-*.txt")


def test_leader_kill_elects_the_standby_and_loses_no_key(healthy: PlatformHandle, tmp_path: Path) -> None:
    before = healthy.mooncake_leader()
    run = playbook(healthy, tmp_path, drill="leader_kill")
    ev = run.evidence("leader_kill")
    assert run.rc == 0, run.failed_checks(ev)
    assert ev["previous_leader"] == before and ev["new_leader"] not in (None, before)
    assert ev["client"]["seed_keys_written"] == 50 and ev["client"]["seed_keys_lost"] == 0
    assert ev["time_to_new_leader_s"] is not None and ev["time_to_writes_ok_s"] is not None
    assert ev["progress"]["write_failures"] > 0, "the client never noticed the leader was gone: was it really killed?"
    assert ev["after_restore"]["verdict"] == "healthy"


def test_a_sigstopped_leader_is_detected_and_replaced(healthy: PlatformHandle, tmp_path: Path) -> None:
    before = healthy.mooncake_leader()
    run = playbook(healthy, tmp_path, drill="leader_stop")
    ev = run.evidence("leader_stop")
    assert run.rc == 0, run.failed_checks(ev)
    assert ev["new_leader"] not in (None, before)
    # While frozen, the old leader accepts connections and never answers: diagnose names it.
    assert ev["during_fault"]["verdict"] == "degraded"
    assert any(before in r["what"] for r in ev["during_fault"]["reasons"]), ev["during_fault"]["reasons"]
    assert ev["client"]["seed_keys_lost"] == 0


def test_one_etcd_member_down_keeps_quorum_without_failover(healthy: PlatformHandle, tmp_path: Path) -> None:
    before = healthy.mooncake_leader()
    run = playbook(healthy, tmp_path, drill="etcd_member_down")
    ev = run.evidence("etcd_member_down")
    assert run.rc == 0, run.failed_checks(ev)
    assert ev["victim"]["name"].startswith("etcd-")
    assert ev["progress"]["new_leader"] is None and ev["progress"]["view_changes"] == 0
    assert ev["during_fault"]["etcd"]["quorum"] is True and ev["during_fault"]["etcd"]["answering"] == 2
    assert ev["after_restore"]["leader"] == before
    assert ev["client"]["seed_keys_lost"] == 0


def test_a_stopped_etcd_leader_is_detected(healthy: PlatformHandle, tmp_path: Path) -> None:
    run = playbook(healthy, tmp_path, drill="etcd_leader_stop")
    ev = run.evidence("etcd_leader_stop")
    failed = run.failed_checks(ev)
    # Detection is ours and must hold. Whether Mooncake keeps its keys is Mooncake's: its leader can
    # lose the master_view lease while the etcd leader hangs and re-elect itself from an empty
    # standby (seen here: every key lost). The drill reports that as a failure; it must be the only one.
    assert not [c for c in failed if KEY_LOSS_CHECK not in c], failed
    assert (run.rc == 0) == (not failed)
    assert ev["victim"]["endpoint"] in ev["progress"]["etcd_unanswering"]
    assert ev["progress"]["etcd_new_leader_s"] is not None
    assert ev["during_fault"]["verdict"] in ("degraded", "down")


def test_rolling_restart_never_shows_two_leaders(healthy: PlatformHandle, tmp_path: Path) -> None:
    pids = {m.name: healthy.state.process(m.name).pid for m in healthy.state.endpoints.mooncake.masters}
    run = playbook(healthy, tmp_path, drill="master_rolling_restart")
    ev = run.evidence("master_rolling_restart")
    failed = run.failed_checks(ev)
    # What the procedure guarantees: one master at a time, never two serving, every master
    # restarted, healthy at the end.
    assert set(failed) <= {"at most 0 seed keys lost"}, failed
    assert ev["progress"]["two_serving_samples"] == 0 and ev["progress"]["samples"] > 20
    after = {m.name: healthy.state.process(m.name).pid for m in healthy.state.endpoints.mooncake.masters}
    assert all(after[n] != pids[n] for n in pids), f"not every master was restarted: {pids} -> {after}"
    # Key survival is Mooncake's: the oplog carries the objects, but a client that only remounts
    # its segment after the new leader's warm-up loses what it held (CI saw 50 of 50 once, the
    # client's reconnect timing out under load). The drill must then fail and name the keys.
    lost = ev["client"]["seed_keys_lost"]
    if lost:
        assert run.rc == 2 and failed == ["at most 0 seed keys lost"] and ev["client"]["lost_seed_keys"], ev["client"]
    else:
        assert run.rc == 0 and not failed


def test_both_masters_down_is_said_plainly_and_recovery_brings_them_back(healthy: PlatformHandle, tmp_path: Path) -> None:
    masters = [m.name for m in healthy.state.endpoints.mooncake.masters]
    try:
        for name in masters:
            healthy.proc("kill", name)
        run = playbook(healthy, tmp_path / "diagnose")
        assert run.rc != 0
        assert "Mooncake is DOWN" in run.stdout and "no Mooncake master answers" in run.stdout
        report = json.loads(sorted((tmp_path / "diagnose" / "reports").glob("diagnose-*.json"))[-1].read_text())
        assert report["verdict"] == "down" and report["assessment"]["masters_down"] == masters
        assert "mode=recovery" in report["next_step"]

        run = playbook(healthy, tmp_path / "recovery", mode="recovery")
        assert run.rc == 0, run.stdout[-3000:]
        recovery = json.loads(sorted((tmp_path / "recovery" / "reports").glob("recovery-*.json"))[-1].read_text())
        assert recovery["before"]["verdict"] == "down" and recovery["after"]["verdict"] == "healthy"
        assert sorted(recovery["after"]["masters_up"]) == sorted(masters)
    finally:
        for name in masters:
            if healthy.state.process(name).pid is None:
                healthy.proc("start", name)


def test_production_drill_is_refused_without_allow_and_confirmation(healthy: PlatformHandle, tmp_path: Path) -> None:
    before = healthy.mooncake_leader()
    run = playbook(healthy, tmp_path, drill="leader_kill", inferplane_environment="prod", allow_production_drill=True)
    assert run.rc != 0
    assert "Refusing to drill production" in run.stdout and "drill prod leader_kill" in run.stdout
    assert not list((tmp_path / "reports").glob("drill-*")), "a refused drill must not even start recording"
    assert healthy.mooncake_leader() == before


def test_stale_metadata_is_deleted_only_when_confirmed(healthy: PlatformHandle, tmp_path: Path) -> None:
    endpoint = healthy.state.endpoints.etcd.endpoints[0]
    stale = "mooncake/ram/127.0.0.1:9"  # a segment nobody mounts: what a crashed client leaves behind
    ha.etcd_call(endpoint, "/v3/kv/put", {"key": ha.b64(stale), "value": ha.b64("{}")})
    cid = healthy.state.endpoints.mooncake.cluster_id
    view_before = ha.etcd_range(endpoint, ha.master_view_key(cid))
    try:
        dry = playbook(healthy, tmp_path / "dry", mode="recovery", stale_cleanup=True, mooncake_recovery_stale_settle_s=1)
        assert dry.rc == 0, dry.stdout[-3000:]
        assert "1 stale descriptor(s), deleted 0" in dry.stdout
        assert ha.etcd_range(endpoint, stale)

        real = playbook(
            healthy,
            tmp_path / "real",
            mode="recovery",
            stale_cleanup=True,
            stale_cleanup_confirm="delete-stale-metadata",
            mooncake_recovery_stale_settle_s=1,
        )
        assert real.rc == 0, real.stdout[-3000:]
        assert "deleted 1" in real.stdout
        assert not ha.etcd_range(endpoint, stale)
        assert ha.etcd_range(endpoint, ha.master_view_key(cid))[0]["value"] == view_before[0]["value"]
    finally:
        ha.etcd_call(endpoint, "/v3/kv/deleterange", {"key": ha.b64(stale)})
