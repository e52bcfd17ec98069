"""Fabric pairs: ring planning, prerequisite gates, pair evaluation, blame attribution, and a real run of the
serve/run/collect steps against the fake ib_write_bw and transfer_engine_bench on this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inferplane.node import fabric_checks as fc
from inferplane.node import fabric_runner as fr
from inferplane.node.checks import FAIL, OK, WARN
from inferplane.node.report import assemble

from .conftest import port_block

RAILS = {0: "mlx5_0", 4: "mlx5_4"}


def node(name: str, rack: str, **kw) -> dict:
    return {"name": name, "rack": rack, "address": "127.0.0.1", "failing": {}, "gpu_nic": RAILS, **kw}


# --------------------------------------------------------------------------- rings


def test_same_rack_ring_stays_in_its_rack():
    racks = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b"}
    assert fc.ring_edges("same_rack", list(racks), racks) == [("a1", "a2"), ("a2", "a3"), ("a3", "a1"), ("b1", "b2"), ("b2", "b1")]


def test_cross_rack_ring_always_crosses_and_gives_every_node_a_pair():
    racks = {f"a{i}": "a" for i in range(5)} | {"b0": "b", "b1": "b"}
    edges = fc.ring_edges("cross_rack", list(racks), racks)
    assert all(racks[c] != racks[s] for c, s in edges)
    assert sorted(c for c, _ in edges) == sorted(racks)


def test_one_rack_has_no_cross_rack_pairs():
    assert fc.ring_edges("cross_rack", ["a1", "a2"], {"a1": "a", "a2": "a"}) == []


def test_plan_excludes_nodes_whose_prerequisites_failed_and_warns_lonely_ones():
    nodes = [
        node("a1", "a"),
        node("a2", "a", failing={"rdma": ["rdma_peermem"]}),
        node("a3", "a", failing={"gpu": ["gpu_ecc"]}),
        node("b1", "b", failing={"rdma": ["rdma_port_state"]}),
    ]
    plan = fc.plan(nodes, list(fc.KINDS), 18515)
    assert plan["excluded"]["gpudirect_same_rack"] == {
        "a2": "prerequisite failed: rdma_peermem",
        "a3": "prerequisite failed: gpu_ecc",
        "b1": "prerequisite failed: rdma_port_state",
    }
    assert plan["excluded"]["rdma_same_rack"] == {"b1": "prerequisite failed: rdma_port_state"}
    assert plan["edges"]["rdma_same_rack"] == [["a1", "a2"], ["a2", "a3"], ["a3", "a1"]]
    assert plan["no_peer"]["gpudirect_same_rack"] == {"a1": "no peer: no other node in a is eligible for this test"}
    assert plan["no_peer"]["rdma_cross_rack"] == {n: "no peer: no eligible node in another rack" for n in ("a1", "a2", "a3")}


def test_plan_gives_each_rail_its_own_server_port():
    plan = fc.plan([node("a1", "a"), node("a2", "a"), node("a3", "a")], ["rdma_same_rack", "gpudirect_same_rack"], 18515)
    ports = [(t["server"], r["port"]) for per in plan["nodes"].values() for t in per["run"] for r in t["rails"]]
    assert len(ports) == len(set(ports)) == 12
    gd = next(t for t in plan["nodes"]["a1"]["run"] if t["kind"] == "gpudirect_same_rack")
    assert gd["cuda"] and [(r["client_device"], r["client_gpu"]) for r in gd["rails"]] == [("mlx5_0", 0), ("mlx5_4", 4)]


def test_rails_fall_back_to_the_observed_map():
    observed = {"gpu_map": {"1": {"nic": "mlx5_1"}, "0": {"nic": "mlx5_0"}, "2": {"nic": None}}}
    assert fc.rails_for(observed) == [{"gpu": 0, "device": "mlx5_0"}, {"gpu": 1, "device": "mlx5_1"}]
    assert fc.plan([node("a1", "a", gpu_nic={})], ["rdma_same_rack"], 1)["excluded"]["rdma_same_rack"]["a1"].startswith("no GPU/NIC rail")


# --------------------------------------------------------------------------- attribution


def edges(pairs: dict[tuple[str, str], bool]) -> list[dict]:
    return [{"client": c, "server": s, "ok": ok, "observed": "ok" if ok else "150.0 Gb/s"} for (c, s), ok in pairs.items()]


def test_a_bad_node_in_a_ring_is_blamed_and_its_neighbours_are_not():
    out = fc.attribute("gpudirect_same_rack", edges({("a", "b"): True, ("b", "c"): False, ("c", "a"): False}), ["a", "b", "c"])
    assert {n: c["status"] for n, c in out.items()} == {"a": OK, "b": OK, "c": FAIL}
    assert "attributed to c" in out["a"]["observed"] and "PCIe ACS" in out["c"]["hint"]


def test_two_nodes_alone_are_both_blamed_and_told_so():
    out = fc.attribute("rdma_same_rack", edges({("a", "b"): False, ("b", "a"): False}), ["a", "b"])
    assert out["a"]["status"] == out["b"]["status"] == FAIL
    assert "retest each against a third node" in out["a"]["hint"]


def test_a_failing_pair_between_good_nodes_warns_both_about_the_path():
    out = fc.attribute(
        "rdma_cross_rack", edges({("a", "b"): False, ("b", "c"): True, ("c", "d"): True, ("d", "a"): True}), ["a", "b", "c", "d"]
    )
    assert {n: c["status"] for n, c in out.items()} == {"a": WARN, "b": WARN, "c": OK, "d": OK}
    assert "path between them" in out["a"]["hint"]


def test_a_single_pair_node_is_cleared_when_its_peer_is_to_blame():
    out = fc.attribute("rdma_cross_rack", edges({("x", "s"): False, ("s", "y"): False, ("z", "s"): False}), ["s", "x", "y", "z"])
    assert {n: c["status"] for n, c in out.items()} == {"s": FAIL, "x": OK, "y": OK, "z": OK}


def test_pair_evaluation_against_floors():
    test = {"tool": "ib_write_bw"}
    client = {"rails": [{"client_device": "mlx5_0", "server_device": "mlx5_0", "parsed": {"ok": True, "bw_avg_gbps": 150.0}}]}
    assert fc.evaluate_edge(test, client, None, 350) == (False, "mlx5_0->mlx5_0 150.0 Gb/s (floor 350 Gb/s)")
    assert fc.evaluate_edge(test, client, None, 100) == (True, "min 150.0 Gb/s over 1 rails")
    kv = {"tool": "transfer_engine_bench"}
    rdma = {"parsed": {"transport": "rdma", "completed": True, "throughput_gbytes": 43.7, "rdma_devices": ["mlx5_0"]}}
    tcp_target = {"parsed": {"transport": "tcp", "hcas_found": 0}}
    assert fc.evaluate_edge(kv, rdma, tcp_target, 20) == (False, "target transport tcp (0 HCAs found)")
    assert fc.evaluate_edge(kv, rdma, rdma, 20)[0]
    assert fc.evaluate_edge(kv, None, rdma, 20) == (False, "no client result (the client node did not run the test)")


# --------------------------------------------------------------------------- real processes, fake tools


def _our_servers() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "fake-bin/ib_write_bw" in line or "fake-bin/transfer_engine_bench" in line]


@pytest.mark.usefixtures("fake_path")
def test_serve_run_collect_between_three_local_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INFERPLANE_FAKE_VARIANT", "healthy")
    free = [port_block() for _ in range(3)]
    nodes = [node(n, r, base_port=p) for (n, r), p in zip([("n1", "a"), ("n2", "a"), ("n3", "b")], free, strict=True)]
    plan = fc.plan(nodes, list(fc.KINDS), 18515)
    options = fr.Options(duration_s=1, gid_index=3, ready_timeout_s=60)
    served = {
        n["name"]: fr.serve(plan["nodes"][n["name"]]["serve"], n["name"], str(tmp_path / "s" / "run" / n["name"]), options) for n in nodes
    }
    assert all(not e.get("error") for s in served.values() for e in s["servers"].values())
    results = {n["name"]: fr.run_clients(plan["nodes"][n["name"]]["run"], n["name"], served, options) for n in nodes}
    for n in nodes:
        results[n["name"]].update(fr.collect(served[n["name"]]["session"]))
    assert not (tmp_path / "s").exists(), "collect leaves no session directory behind"
    assert _our_servers() == []
    report = assemble(
        [{"name": n["name"], "rack": n["rack"], "results": {"fabric": results[n["name"]]}} for n in nodes], plan, FLOORS, list(fc.KINDS)
    )
    lines = {name: {c["name"]: c for c in r["checks"]} for name, r in report["nodes"].items()}
    assert lines["n1"]["fabric_rdma_same_rack"]["status"] == OK
    assert lines["n1"]["fabric_rdma_same_rack"]["observed"] == "2/2 pairs ok (min 392.4 Gb/s over 2 rails)"
    assert lines["n2"]["fabric_gpudirect_cross_rack"]["observed"].startswith("2/2 pairs ok (min 388.1 Gb/s")
    assert lines["n3"]["fabric_kv_rdma"]["status"] == OK and "RDMA on both ends" in lines["n3"]["fabric_kv_rdma"]["observed"]
    assert lines["n3"]["fabric_rdma_same_rack"]["status"] == WARN  # alone in rack b
    assert report["summary"]["status"] == "warn"


@pytest.mark.usefixtures("fake_path")
def test_a_server_that_never_started_fails_its_pair_and_is_cleaned_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INFERPLANE_FAKE_VARIANT", "healthy")
    nodes = [node("n1", "a", base_port=port_block()), node("n2", "a", base_port=port_block())]
    plan = fc.plan(nodes, ["rdma_same_rack"], 1)
    options = fr.Options(duration_s=1, ready_timeout_s=60, connect_retries=0)
    served = fr.serve(plan["nodes"]["n1"]["serve"], "n1", str(tmp_path / "n1"), options)
    # n2 never serves: n1's client finds nobody listening.
    result = fr.run_clients(plan["nodes"]["n1"]["run"], "n1", {"n1": served}, options)["client"]["rdma_same_rack:n1->n2"]
    assert all(not r["parsed"]["ok"] and r["parsed"]["error"].startswith("Couldn't connect to 127.0.0.1") for r in result["rails"])
    fr.collect(served["session"], wait_s=0.5)
    assert _our_servers() == [] and not (tmp_path / "n1").exists()


FLOORS = {"rdma_same_rack": 360, "rdma_cross_rack": 340, "gpudirect_same_rack": 350, "gpudirect_cross_rack": 330, "kv_rdma": 20}
