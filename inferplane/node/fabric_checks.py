"""Fabric checks: which node pairs test what, and which node a failing pair is blamed on.

Five kinds of pair test, each with a floor from the inventory:

=========================  ==========================  ==============================================
kind                       tool                        nodes must first pass
=========================  ==========================  ==============================================
rdma_same_rack             ib_write_bw                 the basic RDMA checks
rdma_cross_rack            ib_write_bw                 the basic RDMA checks
gpudirect_same_rack        ib_write_bw --use_cuda      basic RDMA, rdma_peermem, every GPU and
                                                       topology check
gpudirect_cross_rack       ib_write_bw --use_cuda      (same as gpudirect_same_rack)
kv_rdma                    transfer_engine_bench       the basic RDMA checks
=========================  ==========================  ==============================================

The basic RDMA checks are devices, port state, link layer, GID, MTU and memlock; nvidia_peermem
only matters once GPU memory is registered.

The gate is the seed's "basic, then GPUDirect": a node whose port is down is not bandwidth-tested
(the bandwidth test would only fail for the same reason), so each faulty node fails with the check
that names its fault and its fabric lines are listed as skipped.

Pairs are rings, so every node is the client of one pair and the server of another: same-rack
rings per rack; the cross-rack ring interleaves racks and sends each node to the next node of
another rack; the KV ring runs over the interleaved order. A pair that fails is blamed on the node
all of whose pairs of that kind failed; with two or more pairs per node that separates a bad node
from its good neighbours. A failing pair neither end is blamed for points at the path between
them and warns both. Two nodes alone cannot be told apart: both are blamed, and the hint says so.

Stdlib only: this file runs on nodes (and the controller runs the same file).
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import FAIL, OK, WARN, Check, Skip, check, join_limited, skip

AREA = "fabric"


@dataclass(frozen=True)
class Kind:
    ring: str
    tool: str
    cuda: bool
    gates: tuple[str, ...]
    title: str


BASIC_RDMA = ("rdma_devices", "rdma_port_state", "rdma_link_layer", "rdma_gid", "rdma_mtu", "rdma_memlock")
GPUDIRECT = (*BASIC_RDMA, "rdma_peermem", "gpu:*", "topology:*")

KINDS: dict[str, Kind] = {
    "rdma_same_rack": Kind("same_rack", "ib_write_bw", False, BASIC_RDMA, "RDMA write bandwidth within a rack"),
    "rdma_cross_rack": Kind("cross_rack", "ib_write_bw", False, BASIC_RDMA, "RDMA write bandwidth across racks"),
    "gpudirect_same_rack": Kind("same_rack", "ib_write_bw", True, GPUDIRECT, "GPUDirect RDMA bandwidth within a rack"),
    "gpudirect_cross_rack": Kind("cross_rack", "ib_write_bw", True, GPUDIRECT, "GPUDirect RDMA bandwidth across racks"),
    "kv_rdma": Kind("all", "transfer_engine_bench", False, BASIC_RDMA, "Mooncake KV transfer carried by RDMA"),
}


def blocking(gates: tuple[str, ...], failing: dict[str, list[str]]) -> list[str]:
    """The failing checks that keep a node out of a test: named ones, or any of an area's (``gpu:*``)."""
    out: list[str] = []
    for gate in gates:
        if gate.endswith(":*"):
            out += [c for c in failing.get(gate[:-2], []) if c not in out]
        elif any(gate in names for names in failing.values()) and gate not in out:
            out.append(gate)
    return out


def check_name(kind: str) -> str:
    return f"fabric_{kind}"


# --------------------------------------------------------------------------- planning


def _interleave(by_rack: dict[str, list[str]]) -> list[str]:
    """a0 b0 c0 a1 b1 ...: consecutive nodes sit in different racks wherever the racks allow."""
    racks = sorted(by_rack, key=lambda r: (-len(by_rack[r]), r))
    order: list[str] = []
    depth = max((len(v) for v in by_rack.values()), default=0)
    for i in range(depth):
        for rack in racks:
            if i < len(by_rack[rack]):
                order.append(by_rack[rack][i])
    return order


def ring_edges(ring: str, eligible: list[str], rack_of: dict[str, str]) -> list[tuple[str, str]]:
    """(client, server) pairs for one kind over its eligible nodes."""
    by_rack: dict[str, list[str]] = {}
    for name in sorted(eligible):
        by_rack.setdefault(rack_of[name], []).append(name)
    edges: list[tuple[str, str]] = []
    if ring == "same_rack":
        for members in by_rack.values():
            if len(members) >= 2:
                edges += [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]
    elif ring == "cross_rack":
        order = _interleave(by_rack)
        for i, client in enumerate(order):
            for step in range(1, len(order)):
                server = order[(i + step) % len(order)]
                if rack_of[server] != rack_of[client]:
                    edges.append((client, server))
                    break
    else:
        order = _interleave(by_rack)
        if len(order) >= 2:
            edges = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    # A two-node ring lists the same pair twice, once per direction: both directions are tested.
    return edges


def _no_peer_reason(ring: str, name: str, rack: str, eligible: list[str], rack_of: dict[str, str]) -> str:
    if ring == "same_rack":
        return f"no peer: no other node in {rack} is eligible for this test"
    if ring == "cross_rack":
        return "no peer: no eligible node in another rack"
    return "no peer: no other eligible node"


def rails_for(node: dict) -> list[dict]:
    """The node's (GPU, NIC) rails: given explicitly, else the declared GPU -> NIC map, else the map
    the topology check observed (each GPU's closest NIC)."""
    if node.get("rails"):
        return [{"gpu": int(r["gpu"]), "device": str(r["device"])} for r in node["rails"]]
    declared = node.get("gpu_nic") or {}
    if declared:
        return [{"gpu": int(g), "device": str(d)} for g, d in sorted(declared.items(), key=lambda kv: int(kv[0]))]
    observed = node.get("gpu_map") or {}
    return [{"gpu": int(g), "device": str(m["nic"])} for g, m in sorted(observed.items(), key=lambda kv: int(kv[0])) if m.get("nic")]


def plan(nodes: list[dict], kinds: list[str], base_port: int) -> dict:
    """Pair tests per node.

    ``nodes``: ``{name, rack, address, failing: {area: [check names]}}`` plus the rails, as
    ``rails: [{gpu, device}]`` or the ``gpu_nic`` / ``gpu_map`` maps ``rails_for`` reads.
    Returns ``{nodes: {name: {serve: [test], run: [test]}}, excluded: {kind: {name: reason}},
    no_peer: {kind: {name: reason}}, edges: {kind: [[client, server]]}}``.
    """
    nodes = [{**n, "rails": rails_for(n)} for n in nodes]
    by_name = {n["name"]: n for n in nodes}
    rack_of = {n["name"]: n["rack"] for n in nodes}
    out: dict = {"nodes": {n["name"]: {"serve": [], "run": []} for n in nodes}, "excluded": {}, "no_peer": {}, "edges": {}}
    # Every node serves from the same base port unless it names its own (several "nodes" on one test machine).
    next_port = {n["name"]: int(n.get("base_port") or base_port) for n in nodes}
    for kind in kinds:
        spec = KINDS[kind]
        excluded: dict[str, str] = {}
        eligible = []
        for n in nodes:
            blocked_by = blocking(spec.gates, n.get("failing") or {})
            if blocked_by:
                excluded[n["name"]] = f"prerequisite failed: {', '.join(blocked_by)}"
            elif not n.get("rails"):
                excluded[n["name"]] = "no GPU/NIC rail to test (declare preflight_topology_gpu_nic or fix the topology)"
            else:
                eligible.append(n["name"])
        edges = ring_edges(spec.ring, eligible, rack_of)
        touched = {e for pair in edges for e in pair}
        out["no_peer"][kind] = {
            name: _no_peer_reason(spec.ring, name, rack_of[name], eligible, rack_of) for name in eligible if name not in touched
        }
        out["excluded"][kind] = excluded
        out["edges"][kind] = [list(e) for e in edges]
        for client, server in edges:
            c, s = by_name[client], by_name[server]
            count = min(len(c["rails"]), len(s["rails"]))
            test = {
                "id": f"{kind}:{client}->{server}",
                "kind": kind,
                "tool": spec.tool,
                "cuda": spec.cuda,
                "client": client,
                "server": server,
                "server_address": s["address"],
                "client_address": c["address"],
            }
            if spec.tool == "ib_write_bw":
                rails = []
                for i in range(count):
                    rails.append(
                        {
                            "client_device": c["rails"][i]["device"],
                            "client_gpu": c["rails"][i]["gpu"],
                            "server_device": s["rails"][i]["device"],
                            "server_gpu": s["rails"][i]["gpu"],
                            "port": next_port[server],
                        }
                    )
                    next_port[server] += 1
                test["rails"] = rails
            else:
                test["client_devices"] = ",".join(r["device"] for r in c["rails"])
                test["server_devices"] = ",".join(r["device"] for r in s["rails"])
            out["nodes"][server]["serve"].append(test)
            out["nodes"][client]["run"].append(test)
    return out


# --------------------------------------------------------------------------- pair results


def evaluate_edge(test: dict, client_result: dict | None, server_result: dict | None, floor: float) -> tuple[bool, str]:
    """Did this pair meet its floor? ``(ok, observed)``."""
    if client_result is None:
        return False, "no client result (the client node did not run the test)"
    if test["tool"] == "ib_write_bw":
        return _edge_bw(test, client_result, server_result, floor)
    return _edge_kv(client_result, server_result, floor)


def _edge_bw(test: dict, client: dict, server: dict | None, floor: float) -> tuple[bool, str]:
    bad, speeds = [], []
    for rail in client.get("rails", []):
        parsed = rail.get("parsed") or {}
        label = f"{rail.get('client_device')}->{rail.get('server_device')}"
        bw = parsed.get("bw_avg_gbps")
        if not parsed.get("ok") or bw is None:
            bad.append(f"{label} failed: {parsed.get('error') or rail.get('error') or 'no result'}")
        elif bw < floor:
            bad.append(f"{label} {bw:.1f} Gb/s")
            speeds.append(bw)
        else:
            speeds.append(bw)
    if not client.get("rails"):
        bad.append("no rail was tested")
    if bad:
        return False, join_limited(bad, 3) + f" (floor {floor:g} Gb/s)"
    return True, f"min {min(speeds):.1f} Gb/s over {len(speeds)} rails"


def _edge_kv(client: dict, server: dict | None, floor: float) -> tuple[bool, str]:
    init = client.get("parsed") or {}
    target = (server or {}).get("parsed") or {}
    problems = []
    if init.get("transport") != "rdma":
        problems.append(f"initiator transport {init.get('transport') or 'unknown'}" + _hcas(init))
    if target.get("transport") != "rdma":
        problems.append(f"target transport {target.get('transport') or 'unknown'}" + _hcas(target))
    if not init.get("completed"):
        problems.append("transfer did not complete" + (f": {init['errors'][0]}" if init.get("errors") else ""))
    elif floor and (init.get("throughput_gbytes") or 0) < floor:
        problems.append(f"{init.get('throughput_gbytes')} GB/s < {floor:g} GB/s")
    if problems:
        return False, "; ".join(problems)
    return True, f"RDMA on both ends ({', '.join(init.get('rdma_devices') or [])}), {init.get('throughput_gbytes')} GB/s"


def _hcas(run: dict) -> str:
    return f" ({run['hcas_found']} HCAs found)" if run.get("hcas_found") is not None else ""


def own_transport(node_results: dict | None) -> str | None:
    """What this node's own transfer engine logs say it used, as target or as initiator."""
    if not node_results:
        return None
    seen = set()
    for side in ("client", "server"):
        for result in (node_results.get(side) or {}).values():
            parsed = (result or {}).get("parsed") or {}
            if parsed.get("transport") and (result or {}).get("tool") == "transfer_engine_bench":
                seen.add(parsed["transport"] + _hcas(parsed))
    return ", ".join(sorted(seen)) or None


# --------------------------------------------------------------------------- attribution

_HINTS = {
    "ib_write_bw": "RDMA bandwidth below the floor: check the rail's port counters (ethtool -S / perfquery) for errors and "
    "PFC/ECN drops, the switch port, the transceiver, and PCIe link width/speed of the NIC (lspci -vv)",
    "cuda": "GPUDirect bandwidth below the floor while plain RDMA passes: check PCIe ACS (must be off on the GPU/NIC switch), "
    "IOMMU passthrough, nvidia_peermem/dma-buf, and the GPU's PCIe link (nvidia-smi -q -d PCI)",
    "transfer_engine_bench": "Mooncake did not move KV over RDMA: the transfer engine found no usable HCA and fell back to TCP. "
    "Check that the process sees /dev/infiniband and libibverbs providers (libmlx5), the memlock limit, the device names given "
    "to it (ib_device / MC_* filters), and that RDMA checks pass on both ends",
}


def _pair(edge: dict) -> str:
    return f"{edge['client']}->{edge['server']}: {edge['observed']}"


def attribute(kind: str, edges: list[dict], nodes: list[str]) -> dict[str, Check]:
    """Per-node check for one kind from its pair results.

    ``edges``: ``{client, server, ok, observed}``; ``nodes``: every node that took part.
    """
    spec = KINDS[kind]
    incident: dict[str, list[dict]] = {n: [] for n in nodes}
    for e in edges:
        incident.setdefault(e["client"], []).append(e)
        incident.setdefault(e["server"], []).append(e)
    suspects = {n for n, es in incident.items() if es and all(not e["ok"] for e in es)}
    blamed = {n for n in suspects if len(incident[n]) >= 2}
    for n in suspects - blamed:
        peer = next(e["server"] if e["client"] == n else e["client"] for e in incident[n])
        if peer not in blamed:
            blamed.add(n)
    name = check_name(kind)
    hint = _HINTS["cuda"] if spec.cuda else _HINTS[spec.tool]
    out: dict[str, Check] = {}
    for n, es in incident.items():
        failed = [e for e in es if not e["ok"]]
        desc = [_pair(e) for e in failed]
        if n in blamed:
            peers = {e["server"] if e["client"] == n else e["client"] for e in es}
            note = (
                " Only two nodes took part, so the fault may be on either: retest each against a third node."
                if len(peers) == 1 and len(blamed & peers)
                else ""
            )
            out[n] = check(AREA, name, FAIL, f"all {len(es)} pairs failed: {join_limited(desc, 2)}", spec.title, hint + "." + note)
            continue
        unexplained = [e for e in failed if e["client"] not in blamed and e["server"] not in blamed]
        if unexplained:
            out[n] = check(
                AREA,
                name,
                WARN,
                join_limited([_pair(e) for e in unexplained], 2),
                spec.title,
                "this pair failed while both nodes pass their other pairs: suspect the path between them (switch ports, cables, "
                "ECMP/adaptive routing) and rerun the pair",
            )
            continue
        ok_edges = [e for e in es if e["ok"]]
        observed = f"{len(ok_edges)}/{len(es)} pairs ok"
        if ok_edges:
            observed += f" ({ok_edges[0]['observed']})"
        blamed_peers = sorted({e["server"] if e["client"] == n else e["client"] for e in failed})
        if blamed_peers:
            observed += f"; failing pair(s) attributed to {', '.join(blamed_peers)}"
        out[n] = check(AREA, name, OK, observed, spec.title)
    return out


def node_fabric_checks(
    node: str, plan_doc: dict, attributed: dict[str, dict[str, Check]], kinds: list[str]
) -> tuple[list[Check], list[Skip]]:
    """Assemble one node's fabric lines: attributed pair checks, 'no peer' warnings, and skips."""
    checks: list[Check] = []
    skipped: list[Skip] = []
    for kind in kinds:
        name = check_name(kind)
        excluded = plan_doc.get("excluded", {}).get(kind, {})
        no_peer = plan_doc.get("no_peer", {}).get(kind, {})
        if node in excluded:
            skipped.append(skip(AREA, name, excluded[node]))
        elif node in no_peer:
            checks.append(
                check(
                    AREA,
                    name,
                    WARN,
                    no_peer[node],
                    KINDS[kind].title,
                    "this pair test needs a second eligible node (another in the same rack, or one in another rack): "
                    "the path was not measured; run preflight with more nodes before serving",
                )
            )
        elif node in attributed.get(kind, {}):
            checks.append(attributed[kind][node])
        else:
            skipped.append(skip(AREA, name, "not planned (fabric tag not run)"))
    return checks, skipped
