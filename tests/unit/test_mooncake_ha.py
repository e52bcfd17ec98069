"""The verdict and the drill arithmetic of inferplane.node.mooncake_ha, on made-up observations.

The same functions run against real etcd and masters in tests/integration/test_mooncake_failover.py;
here each rule of the verdict is pinned down on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from inferplane.node import mooncake_ha as ha

LEADER, STANDBY = "10.0.0.1:50051", "10.0.0.2:50051"


def etcd_row(ep: str, ok: bool = True, leader: str = "1", member: str | None = None) -> dict[str, Any]:
    if not ok:
        return {"endpoint": ep, "ok": False, "error": f"{ep}: timed out"}
    return {"endpoint": ep, "ok": True, "member_id": member or ep[-1], "leader_id": leader, "healthy": True}


def master(name: str, addr: str, role: str = "standby", state: str = "standby", follows: str = LEADER, lag: float = 0) -> dict[str, Any]:
    return {
        "name": name,
        "rpc_address": addr,
        "ok": True,
        "role": role,
        "ha_state": state,
        "service_ready": state == "serving",
        "leader_address": follows,
        "view_version": 7,
        "metrics": {"ha_oplog_standby_lag": lag},
    }


def down(name: str, addr: str) -> dict[str, Any]:
    return {"name": name, "rpc_address": addr, "ok": False, "error": "connection refused"}


def snap(
    etcd: list[dict[str, Any]] | None = None, masters: list[dict[str, Any]] | None = None, view: str = LEADER, alarms: list | None = None
) -> dict[str, Any]:
    etcd = etcd if etcd is not None else [etcd_row("e:1"), etcd_row("e:2"), etcd_row("e:3")]
    members = [{"id": str(i), "name": f"etcd-{i - 1}"} for i in (1, 2, 3)]
    if masters is None:
        masters = [master("m0", LEADER, "leader", "serving"), master("m1", STANDBY)]
    return {
        "etcd": {"endpoints": etcd, "members": members, "alarms": alarms or [], "errors": []},
        "master_view": {"value": view, "lease": 42, "ttl": 4},
        "masters": masters,
        "workers": [],
        "segments": [],
    }


def test_one_serving_leader_that_holds_the_view_is_healthy() -> None:
    result = ha.assess(snap())
    assert result["verdict"] == "healthy" and result["leader"] == "m0" and result["standbys"] == ["m1"]
    assert result["etcd"]["quorum"] and result["etcd"]["leader"] == "etcd-0"


def test_no_master_answering_is_down_and_says_run_recovery() -> None:
    result = ha.assess(snap(masters=[down("m0", LEADER), down("m1", STANDBY)], view=""))
    assert result["verdict"] == "down"
    assert "no Mooncake master answers" in result["reasons"][0]["what"] and "mode=recovery" in result["next_step"]


def test_etcd_without_quorum_is_down_and_named_first() -> None:
    etcd = [etcd_row("e:1"), etcd_row("e:2", ok=False), etcd_row("e:3", ok=False)]
    result = ha.assess(snap(etcd=etcd))
    assert result["verdict"] == "down" and not result["etcd"]["quorum"]
    assert result["next_step"].startswith("restore etcd first")


def test_one_etcd_member_lost_keeps_quorum_but_is_degraded() -> None:
    result = ha.assess(snap(etcd=[etcd_row("e:1"), etcd_row("e:2"), etcd_row("e:3", ok=False)]))
    assert result["verdict"] == "degraded" and result["etcd"]["quorum"]
    assert "e:3" in result["reasons"][0]["what"]


def test_two_serving_leaders_is_split_brain_and_outranks_everything() -> None:
    masters = [master("m0", LEADER, "leader", "serving"), master("m1", STANDBY, "leader", "serving", follows=STANDBY)]
    result = ha.assess(snap(etcd=[etcd_row("e:1"), etcd_row("e:2", ok=False), etcd_row("e:3")], masters=masters))
    assert result["verdict"] == "split-brain-suspected"
    assert "restart nothing" in result["next_step"]


def test_a_leader_that_is_not_the_view_holder_is_split_brain() -> None:
    result = ha.assess(snap(view=STANDBY))
    assert result["verdict"] == "split-brain-suspected"


def test_the_published_address_not_the_inventory_name_is_compared() -> None:
    # On Kubernetes the leader publishes its pod IP; the inventory knows it by DNS name.
    masters = [master("m0", "mooncake-master-0.mooncake-master.ns.svc:50051", "leader", "serving"), master("m1", STANDBY)]
    assert ha.assess(snap(masters=masters))["verdict"] == "healthy"


def test_a_failover_in_warmup_is_degraded_with_a_retry() -> None:
    masters = [down("m0", LEADER), master("m1", STANDBY, "leader", "leader_warmup", follows=STANDBY)]
    result = ha.assess(snap(masters=masters, view=STANDBY))
    assert result["verdict"] == "degraded" and "warm-up" in result["reasons"][0]["what"]


def test_standby_lag_and_alarms_degrade() -> None:
    lagging = ha.assess(snap(masters=[master("m0", LEADER, "leader", "serving"), master("m1", STANDBY, lag=12)]))
    assert lagging["verdict"] == "degraded" and "lag is 12" in lagging["reasons"][0]["what"]
    alarmed = ha.assess(snap(alarms=[{"member_id": "2", "alarm": "NOSPACE"}]))
    assert alarmed["verdict"] == "degraded" and "NOSPACE on etcd-1" in alarmed["reasons"][0]["what"]


def leaders(t: float, **roles: tuple[str, str] | None) -> dict[str, Any]:
    return {
        "kind": "leaders",
        "t": t,
        "view": next((n for n, r in roles.items() if r and r[0] == "leader"), ""),
        "roles": {n: ({"role": r[0], "ha_state": r[1]} if r else {"error": "timed out"}) for n, r in roles.items()},
    }


def put(t: float, rc: int, dt: float = 0.001) -> dict[str, Any]:
    return {"kind": "put", "t": t, "t1": t + dt, "rc": rc}


def test_drill_progress_measures_a_leader_kill() -> None:
    fault = 100.0
    events = [
        leaders(99.8, m0=("leader", "serving"), m1=("standby", "standby")),
        put(99.9, 0),
        leaders(100.2, m0=None, m1=("standby", "standby")),
        put(100.3, -900, dt=4.0),
        leaders(105.2, m0=None, m1=("leader", "leader_warmup")),
        put(104.4, -200),
        leaders(110.1, m0=None, m1=("leader", "serving")),
        put(110.5, 0),
        put(110.6, 0),
    ]
    p = ha.drill_progress(events, fault, "m0")
    assert p["new_leader"] == "m1" and p["new_leader_s"] == pytest.approx(10.1)
    assert p["leader_gap_s"] == pytest.approx(9.9)
    assert p["writes_recovered_s"] == pytest.approx(10.501) and p["write_outage_s"] == pytest.approx(10.201)
    assert p["failure_codes"] == {"RPC_FAIL": 1, "NO_AVAILABLE_HANDLE": 1}
    assert p["two_serving_samples"] == 0 and p["view_changes"] == 1
    assert ha.drill_done("leader_kill", p, held_s=11, hold_s=0)


def test_drill_progress_counts_two_serving_leaders() -> None:
    events = [
        leaders(1.0, m0=("leader", "serving"), m1=("leader", "serving")),
        leaders(1.2, m0=("leader", "serving"), m1=("standby", "standby")),
    ]
    p = ha.drill_progress(events, 0.0, "m0")
    assert p["two_serving_samples"] == 1 and p["new_leader"] is None


def test_a_leader_drill_is_not_done_before_writes_recover() -> None:
    events = [leaders(10.0, m0=None, m1=("leader", "serving")), put(10.1, -900)]
    p = ha.drill_progress(events, 0.0, "m0")
    assert p["new_leader"] == "m1" and not ha.drill_done("leader_kill", p, held_s=11, hold_s=0)


def test_etcd_drills_hold_and_see_the_new_etcd_leader() -> None:
    etcd = {"kind": "etcd", "t": 3.0, "members": {"e:1": {"error": "timed out"}, "e:2": {"leader_id": "2"}, "e:3": {"leader_id": "2"}}}
    p = ha.drill_progress([etcd, put(3.1, 0)], 0.0, "m0", previous_etcd_leader="1")
    assert p["etcd_new_leader_s"] == 3.0 and p["etcd_unanswering"] == ["e:1"]
    assert not ha.drill_done("etcd_leader_stop", p, held_s=5, hold_s=12)
    assert ha.drill_done("etcd_leader_stop", p, held_s=12, hold_s=12)


def test_percentile_is_nearest_rank() -> None:
    assert ha.percentile([3, 1, 2], 50) == 2 and ha.percentile([5, 1, 4, 2], 50) == 2 and ha.percentile([1, 9], 100) == 9
    with pytest.raises(ValueError):
        ha.percentile([], 50)


def test_etcd_prefix_end_and_base64_round_trip() -> None:
    assert ha.prefix_end("mooncake/ram/") == "mooncake/ram0"
    assert ha.unb64(ha.b64("mooncake-store/c/master_view")) == "mooncake-store/c/master_view"
    assert ha.admin_base("http://h:9003/metrics") == "http://h:9003"


def test_unreachable_probe_is_a_probe_error_not_a_traceback() -> None:
    with pytest.raises(ha.ProbeError):
        ha.master_health("http://127.0.0.1:9", timeout=0.2)
