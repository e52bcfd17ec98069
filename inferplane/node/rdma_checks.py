"""RDMA checks (the basic step, before any bandwidth test): devices, port state, link layer, RoCE v2
GID index, MTU, GPUDirect kernel support (nvidia_peermem or dma-buf) and the memlock limit.

Expected GID index and MTU come from the stack's ``rdma`` spec; the device list and link layer
from the inventory. With no HCA at all there is one failing line (``rdma_devices``) and the
per-port checks are skipped.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import FAIL, OK, Check, Skip, check, join_limited, skip
from .ibv import Hca, Port
from .sysinfo import is_open_kernel_module, kernel_at_least

AREA = "rdma"
NAMES = ("rdma_devices", "rdma_port_state", "rdma_link_layer", "rdma_gid", "rdma_mtu", "rdma_peermem", "rdma_memlock")
PORT_CHECKS = ("rdma_port_state", "rdma_link_layer", "rdma_gid", "rdma_mtu")
UNLIMITED = -1


@dataclass
class RdmaExpect:
    mtu: int
    gid_index: int | None
    link_layer: str = "Ethernet"
    devices: list[str] = field(default_factory=list)
    gpudirect: bool = True
    memlock_min_kib: int = UNLIMITED


def _ports(hcas: list[Hca], wanted: list[str]) -> list[tuple[str, Port]]:
    chosen = [h for h in hcas if not wanted or h.name in wanted]
    return [(h.name, p) for h in chosen for p in h.ports]


def evaluate(
    expect: RdmaExpect,
    hcas: list[Hca] | None,
    devinfo_error: str | None = None,
    modules: set[str] | None = None,
    nvidia_version: str | None = None,
    kernel_release: str = "",
    memlock_kib: int | None = None,
) -> tuple[list[Check], list[Skip], dict]:
    checks: list[Check] = []
    skipped: list[Skip] = []
    devices = _devices(expect, hcas, devinfo_error)
    checks.append(devices)
    ports = _ports(hcas or [], expect.devices)
    if not ports:
        skipped += [skip(AREA, n, "no RDMA port to check (see rdma_devices)") for n in PORT_CHECKS]
    else:
        checks += [_state(ports), _link_layer(expect, ports), _gid(expect, ports), _mtu(expect, ports)]
    peermem, method = _peermem(expect, modules, nvidia_version, kernel_release)
    checks.append(peermem)
    checks.append(_memlock(expect, memlock_kib))
    facts = {"hcas": [h.to_dict() for h in hcas or []], "gpudirect_method": method}
    return checks, skipped, facts


def _devices(expect: RdmaExpect, hcas: list[Hca] | None, error: str | None) -> Check:
    expected = ", ".join(expect.devices) if expect.devices else "at least one HCA"
    hint = (
        "no usable RDMA device: install the HCAs' driver stack (MLNX_OFED/DOCA-OFED as the release pins, or rdma-core with "
        "ibverbs-utils), load mlx5_ib, and check `ibv_devices`; a node without RDMA cannot serve disaggregated P/D"
    )
    if hcas is None:
        return check(AREA, "rdma_devices", FAIL, f"ibv_devinfo unusable: {error}", expected, hint)
    names = [h.name for h in hcas]
    if not names:
        return check(AREA, "rdma_devices", FAIL, "no RDMA device (ibv_devinfo: No IB devices found)", expected, hint)
    missing = [d for d in expect.devices if d not in names]
    return check(
        AREA,
        "rdma_devices",
        FAIL if missing else OK,
        (f"missing {', '.join(missing)}; present " if missing else "") + join_limited(names, 16),
        expected,
        "an expected HCA is absent: check `lspci -d 15b3:`, `dmesg | grep mlx5`, the firmware (mlxfwmanager) and the rail map",
    )


def _state(ports: list[tuple[str, Port]]) -> Check:
    down = [f"{name} port {p.number} {p.state or 'unknown'}" for name, p in ports if not p.is_active]
    return check(
        AREA,
        "rdma_port_state",
        FAIL if down else OK,
        join_limited(down) if down else f"{len(ports)} ports PORT_ACTIVE",
        "every port PORT_ACTIVE",
        "a port is not ACTIVE: check the cable/transceiver and the switch port (`ibstat`, `ip link`, `mlxlink -d <dev>`); "
        "on InfiniBand an INIT port means no subnet manager",
    )


def _link_layer(expect: RdmaExpect, ports: list[tuple[str, Port]]) -> Check:
    wrong = [f"{name} port {p.number} {p.link_layer}" for name, p in ports if p.link_layer != expect.link_layer]
    return check(
        AREA,
        "rdma_link_layer",
        FAIL if wrong else OK,
        join_limited(wrong) if wrong else f"{expect.link_layer} on {len(ports)} ports",
        f"{expect.link_layer} (preflight_rdma_link_layer)",
        "the port runs another link layer than the fabric design: set the port type with mlxconfig (LINK_TYPE_P1) and reboot, "
        "or fix preflight_rdma_link_layer",
    )


def _gid(expect: RdmaExpect, ports: list[tuple[str, Port]]) -> Check:
    if expect.gid_index is None or expect.link_layer != "Ethernet":
        return check(AREA, "rdma_gid", OK, "not used on InfiniBand", "GID index only on RoCE")
    idx = expect.gid_index
    if all(not p.gids for _, p in ports):
        return check(
            AREA,
            "rdma_gid",
            FAIL,
            "no GID table in ibv_devinfo output",
            f"GID[{idx}] is RoCE v2",
            "run `ibv_devinfo -v` by hand; without GIDs the port has no IP address on its netdev",
        )
    wrong = []
    for name, p in ports:
        gid = p.gids.get(idx)
        if gid is None:
            wrong.append(f"{name} port {p.number} has no GID[{idx}]")
        elif gid.type != "RoCE v2":
            wrong.append(f"{name} GID[{idx}] is {gid.type or 'untyped'}")
    return check(
        AREA,
        "rdma_gid",
        FAIL if wrong else OK,
        join_limited(wrong) if wrong else f"GID[{idx}] RoCE v2 on {len(ports)} ports",
        f"GID[{idx}] is RoCE v2 (stack rdma.gid_index)",
        "the GID index the engines use is not RoCE v2: give the netdev its IPv4 address (the RoCE v2 GID follows it), "
        "check `show_gids`, and set rdma.gid_index in the stack to the index that is RoCE v2 on every node",
    )


def _mtu(expect: RdmaExpect, ports: list[tuple[str, Port]]) -> Check:
    wrong = [f"{name} port {p.number} active_mtu {p.active_mtu}" for name, p in ports if p.active_mtu != expect.mtu]
    return check(
        AREA,
        "rdma_mtu",
        FAIL if wrong else OK,
        join_limited(wrong) if wrong else f"active_mtu {expect.mtu} on {len(ports)} ports",
        f"active_mtu {expect.mtu} (stack rdma.mtu)",
        "the port's RDMA MTU differs from the fabric's: set the netdev MTU (RoCE: >= 4200 for 4096, e.g. `ip link set <if> mtu 9000`) "
        "and the switch ports to the same value end to end; a mismatch fragments or drops large messages",
    )


def _peermem(expect: RdmaExpect, modules: set[str] | None, nvidia_version: str | None, kernel_release: str) -> tuple[Check, str | None]:
    if not expect.gpudirect:
        return check(AREA, "rdma_peermem", OK, "GPUDirect RDMA not used", "not required (stack rdma.gpudirect: false)"), None
    loaded = modules is not None and "nvidia_peermem" in modules
    dmabuf = is_open_kernel_module(nvidia_version) and kernel_at_least(kernel_release, 5, 12)
    if loaded:
        return check(AREA, "rdma_peermem", OK, "nvidia_peermem loaded", "nvidia_peermem loaded or dma-buf capable"), "peermem"
    if dmabuf:
        return check(
            AREA,
            "rdma_peermem",
            OK,
            f"dma-buf (open GPU kernel module, kernel {kernel_release})",
            "nvidia_peermem loaded or dma-buf capable",
        ), "dmabuf"
    why = "module list unreadable" if modules is None else "nvidia_peermem not loaded"
    if not is_open_kernel_module(nvidia_version):
        why += ", proprietary GPU kernel module (no dma-buf)"
    elif not kernel_at_least(kernel_release, 5, 12):
        why += f", kernel {kernel_release} < 5.12 (no dma-buf)"
    return check(
        AREA,
        "rdma_peermem",
        FAIL,
        why,
        "nvidia_peermem loaded or dma-buf capable",
        "GPUDirect RDMA cannot register GPU memory: `modprobe nvidia_peermem` (persist it in /etc/modules-load.d/, or set the GPU "
        "operator's driver.rdma.enabled=true), or move to the open GPU kernel modules on kernel >= 5.12 for dma-buf",
    ), None


def _memlock(expect: RdmaExpect, memlock_kib: int | None) -> Check:
    def show(v: int | None) -> str:
        return "unlimited" if v == UNLIMITED else ("unknown" if v is None else f"{v} KiB")

    if expect.memlock_min_kib == UNLIMITED:
        good = memlock_kib == UNLIMITED
    else:
        good = memlock_kib == UNLIMITED or (memlock_kib is not None and memlock_kib >= expect.memlock_min_kib)
    return check(
        AREA,
        "rdma_memlock",
        OK if good else FAIL,
        show(memlock_kib),
        f">= {show(expect.memlock_min_kib)} (preflight_rdma_memlock_min_kib)",
        "RDMA pins memory: raise the memlock limit (`* - memlock unlimited` in /etc/security/limits.d/, LimitMEMLOCK=infinity "
        "for containerd/kubelet) and log in again",
    )
