"""Parse ``nvidia-smi topo -m``: the GPU/NIC connection matrix, CPU and NUMA affinity, NIC legend.

The matrix is tab-separated. Its header names the devices (``GPU0 .. GPUn``, ``NIC0 .. NICm``;
drivers before 525 named NICs ``mlx5_0`` directly) followed by ``CPU Affinity``, ``NUMA Affinity``
and, on newer drivers, ``GPU NUMA ID``. Rows repeat the device name, one cell per device, then the
affinity columns; drivers pad with empty cells, so the affinity values are matched to their
headers after dropping empty cells. ``NIC Legend`` maps ``NICk`` to the RDMA device name.

Link types, best first: ``X`` (self), ``NV#`` (# bonded NVLinks), ``PIX`` (at most one PCIe
bridge), ``PXB`` (several bridges, no host bridge), ``PHB`` (through a host bridge), ``NODE``
(between host bridges of one NUMA node), ``SYS`` (across the SMP interconnect between NUMA nodes).

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINK_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
_GPU = re.compile(r"^GPU(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


class TopoParseError(ValueError):
    """The text is not a ``nvidia-smi topo -m`` matrix."""


def link_rank(link: str) -> int:
    """Smaller is closer; unknown link types sort last."""
    link = link.strip()
    if link.startswith("NV"):
        return LINK_RANK["NV"]
    return LINK_RANK.get(link, 99)


@dataclass
class Topology:
    devices: list[str]
    matrix: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)
    numa_affinity: dict[str, int | None] = field(default_factory=dict)
    gpu_numa_id: dict[str, int | None] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[int]:
        return sorted(int(m.group(1)) for d in self.devices if (m := _GPU.match(d)))

    @property
    def nics(self) -> list[str]:
        """RDMA device names (``mlx5_0``), in matrix order."""
        return [self.nic_legend.get(d, d) for d in self.devices if not _GPU.match(d)]

    def _column(self, nic: str) -> str | None:
        for dev in self.devices:
            if dev == nic or self.nic_legend.get(dev) == nic:
                return dev
        return None

    def link(self, gpu: int, nic: str) -> str | None:
        """Link type between GPU ``gpu`` and RDMA device ``nic`` (``mlx5_3`` or ``NIC3``)."""
        column = self._column(nic)
        row = self.matrix.get(f"GPU{gpu}")
        if column is None or row is None:
            return None
        return row.get(column)

    def best_nic(self, gpu: int) -> tuple[str, str] | None:
        """The closest NIC to a GPU as (rdma device, link); ties go to the lower NIC index."""
        row = self.matrix.get(f"GPU{gpu}", {})
        best: tuple[str, str] | None = None
        for dev in self.devices:
            if _GPU.match(dev) or dev not in row:
                continue
            if best is None or link_rank(row[dev]) < link_rank(best[1]):
                best = (self.nic_legend.get(dev, dev), row[dev])
        return best

    def numa(self, gpu: int) -> int | None:
        return self.numa_affinity.get(f"GPU{gpu}")

    def to_dict(self) -> dict:
        return {
            "devices": self.devices,
            "matrix": self.matrix,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "gpu_numa_id": self.gpu_numa_id,
            "nic_legend": self.nic_legend,
        }


def _numa(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isdigit() else None


# nvidia-smi underlines the matrix header with SGR escapes even when stdout is not a terminal
# (seen on a real H200, driver 580.159.04); recorded fixtures often have them stripped.
_ANSI_SGR = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> Topology:
    lines = _ANSI_SGR.sub("", text).splitlines()
    header_index = next((i for i, line in enumerate(lines) if "\t" in line and re.search(r"\bGPU0\b", line)), None)
    if header_index is None:
        first = text.strip().splitlines()[0] if text.strip() else "(empty output)"
        raise TopoParseError(f"no GPU matrix in `nvidia-smi topo -m` output; it said: {first[:200]}")
    header = [h.strip() for h in lines[header_index].split("\t")]
    names = [h for h in header if h]
    extra_names = [h for h in names if h in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    devices = [h for h in names if h not in extra_names]
    topo = Topology(devices=devices, matrix={})
    for line in lines[header_index + 1 :]:
        if not line.strip():
            # The matrix ends at the first blank line; the legend follows.
            if topo.matrix:
                break
            continue
        cells = line.split("\t")
        name = cells[0].strip()
        if name not in devices:
            continue
        values = [c.strip() for c in cells[1 : 1 + len(devices)]]
        if len(values) < len(devices):
            raise TopoParseError(f"row {name} has {len(values)} cells for {len(devices)} devices")
        topo.matrix[name] = dict(zip(devices, values, strict=True))
        rest = [c.strip() for c in cells[1 + len(devices) :] if c.strip()]
        extras = dict(zip(extra_names, rest, strict=False))
        topo.cpu_affinity[name] = extras.get("CPU Affinity")
        topo.numa_affinity[name] = _numa(extras.get("NUMA Affinity"))
        topo.gpu_numa_id[name] = _numa(extras.get("GPU NUMA ID"))
    for line in lines:
        match = _LEGEND.match(line)
        if match:
            topo.nic_legend[match.group(1)] = match.group(2)
    if not topo.matrix:
        raise TopoParseError("the `nvidia-smi topo -m` header has no rows under it")
    return topo
