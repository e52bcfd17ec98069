"""Topology checks from ``nvidia-smi topo -m``: each GPU's NUMA node, each GPU's NIC at PIX/PXB.

The inventory declares the design (``preflight_topology_gpu_numa``: GPU -> NUMA node,
``preflight_topology_gpu_nic``: GPU -> RDMA device). Without a declaration the checks fall back to
what must hold on any GPUDirect node: every GPU has a NUMA affinity and a NIC behind the same
PCIe switch (PIX/PXB). ``SYS`` (the path crosses the inter-socket link) always fails: GPUDirect
RDMA over SYS runs at a fraction of line rate, or not at all with ACS on.

GPUs missing from the matrix are not checked here: ``gpu_count`` already names them.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .checks import FAIL, OK, WARN, Check, Skip, check, join_limited, skip
from .topo import Topology

AREA = "topology"
NAMES = ("topo_gpu_numa", "topo_gpu_nic")


@dataclass
class TopologyExpect:
    gpu_numa: dict[int, int] = field(default_factory=dict)
    gpu_nic: dict[int, str] = field(default_factory=dict)
    allowed_links: tuple[str, ...] = ("PIX", "PXB")
    tolerated_links: tuple[str, ...] = ("PHB", "NODE")


def _compact(mapping: Mapping[int, object]) -> str:
    """``GPU0-3:0 GPU4-7:1`` for a GPU -> value map."""
    runs: list[tuple[int, int, object]] = []
    for gpu in sorted(mapping):
        if runs and runs[-1][1] == gpu - 1 and runs[-1][2] == mapping[gpu]:
            runs[-1] = (runs[-1][0], gpu, mapping[gpu])
        else:
            runs.append((gpu, gpu, mapping[gpu]))
    return " ".join(f"GPU{a}{'-' + str(b) if b != a else ''}:{v}" for a, b, v in runs)


def gpu_map(expect: TopologyExpect, topo: Topology) -> dict[int, dict[str, object]]:
    """Observed GPU -> {numa, nic, link}: the declared NIC where there is one, else the closest."""
    out: dict[int, dict[str, object]] = {}
    for gpu in topo.gpus:
        nic = expect.gpu_nic.get(gpu)
        link = topo.link(gpu, nic) if nic else None
        if nic is None:
            best = topo.best_nic(gpu)
            nic, link = (best[0], best[1]) if best else (None, None)
        out[gpu] = {"numa": topo.numa(gpu), "nic": nic, "link": link}
    return out


def evaluate(expect: TopologyExpect, topo: Topology | None, error: str | None = None) -> tuple[list[Check], list[Skip], dict]:
    if topo is None:
        if error and ("not found" in error or "No such file" in error):
            return [], [skip(AREA, n, f"nvidia-smi is not installed ({error}); see gpu_count") for n in NAMES], {}
        hint = "run `nvidia-smi topo -m` by hand; a driver that cannot read the topology usually has a GPU off the bus"
        return (
            [check(AREA, "topo_gpu_nic", FAIL, f"`nvidia-smi topo -m` unusable: {error}", "a readable topology", hint)],
            [skip(AREA, "topo_gpu_numa", "topology unreadable (see topo_gpu_nic)")],
            {},
        )
    mapping = gpu_map(expect, topo)
    return (
        [_numa(expect, mapping), _nic(expect, topo, mapping)],
        [],
        {"gpu_map": {str(k): v for k, v in mapping.items()}, "nics": topo.nics},
    )


def _numa(expect: TopologyExpect, mapping: dict[int, dict[str, object]]) -> Check:
    observed = {gpu: m["numa"] if m["numa"] is not None else "N/A" for gpu, m in mapping.items()}
    if expect.gpu_numa:
        wrong = [
            f"GPU{g} on NUMA {observed[g]}, expected {want}"
            for g, want in sorted(expect.gpu_numa.items())
            if g in observed and observed[g] != want
        ]
        expected = _compact(dict(expect.gpu_numa)) + " (preflight_topology_gpu_numa)"
    else:
        wrong = [f"GPU{g} has no NUMA affinity" for g, v in sorted(observed.items()) if v == "N/A"]
        expected = "every GPU has a NUMA affinity (declare preflight_topology_gpu_numa to pin the design)"
    return check(
        AREA,
        "topo_gpu_numa",
        FAIL if wrong else OK,
        join_limited(wrong) if wrong else _compact(observed),
        expected,
        "the GPU sits on another socket than the design: check the riser/slot population against the platform's "
        "GPU/NIC map and the BIOS NUMA settings (NPS/SNC); a wrong map in the inventory is fixed in preflight_topology_gpu_numa",
    )


def _nic(expect: TopologyExpect, topo: Topology, mapping: dict[int, dict[str, object]]) -> Check:
    allowed = "/".join(expect.allowed_links)
    if not topo.nics:
        return check(
            AREA,
            "topo_gpu_nic",
            FAIL,
            "no RDMA NIC in `nvidia-smi topo -m`",
            f"each GPU with a NIC at {allowed}",
            "no RDMA NIC is visible to the driver: GPUDirect RDMA is impossible; install the HCAs/MLNX_OFED (see rdma_devices)",
        )
    fail, warn, ok = [], [], {}
    for gpu, m in sorted(mapping.items()):
        nic, link = m["nic"], m["link"]
        if link is None:
            fail.append(f"GPU{gpu}: {nic or 'no NIC'} not in topology")
        elif link in expect.allowed_links:
            ok[gpu] = f"{nic}({link})"
        elif link in expect.tolerated_links:
            warn.append(f"GPU{gpu}-{nic} {link}")
        else:
            fail.append(f"GPU{gpu}-{nic} {link}")
    declared = "preflight_topology_gpu_nic" if expect.gpu_nic else "closest NIC per GPU"
    return check(
        AREA,
        "topo_gpu_nic",
        FAIL if fail else (WARN if warn else OK),
        join_limited(fail + warn) if (fail or warn) else _compact(ok),
        f"each GPU's NIC at {allowed}, never SYS ({declared})",
        "the GPU and its NIC are not behind the same PCIe switch: GPUDirect traffic crosses the CPU (SYS: the socket link). "
        "Fix the NIC/GPU slot population or cabling to match the platform's rail map, or correct preflight_topology_gpu_nic",
    )
