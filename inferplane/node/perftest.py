"""Parse perftest bandwidth output (``ib_write_bw``, linux-rdma/perftest src/perftest_parameters.c).

The run prints a parameter banner (``Device``, ``Mtu``, ``Link type``, ``GID index``), the local
and remote QP addresses, then one result table::

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      27120            0.00               392.12               0.747930

``--report_gbits`` gives Gb/s; without it the columns are MiB/s and are converted here so every
caller compares Gb/s. Failures print to stderr (``Couldn't connect to host:port``, ``Unable to
find the Infiniband/RoCE device``, ``Couldn't allocate MR``); the first such line is kept as the
error.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb/sec|MiB/sec|MB/sec)\]\s+BW average\[(?:Gb/sec|MiB/sec|MB/sec)\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)")
_BANNER = re.compile(r"^\s*(Device|Mtu|Link type|GID index|Transport type|Connection type)\s*:\s*(\S+)")
_ERRORS = (
    "Couldn't connect",
    "Unable to find the Infiniband/RoCE device",
    "Couldn't get context",
    "Couldn't allocate MR",
    "Couldn't create",
    "Failed to",
    "Unable to init the socket connection",
    "No such device",
    "Couldn't init GPU context",
    "DMA-BUF is not supported",
    "cuMemAlloc error",
    "Conflicting CPU frequency",
)
_MIBPS_TO_GBPS = 8 * 1024 * 1024 / 1e9


@dataclass
class BwResult:
    ok: bool
    bw_avg_gbps: float | None = None
    bw_peak_gbps: float | None = None
    msg_size: int | None = None
    iterations: int | None = None
    device: str | None = None
    link_type: str | None = None
    mtu: int | None = None
    gid_index: int | None = None
    cuda: bool = False
    dmabuf: bool = False
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def parse_bw(text: str) -> BwResult:
    result = BwResult(ok=False)
    unit = None
    for line in text.splitlines():
        banner = _BANNER.match(line)
        if banner:
            key, value = banner.group(1), banner.group(2)
            if key == "Device":
                result.device = value
            elif key == "Mtu":
                result.mtu = int(re.sub(r"\D", "", value) or 0) or None
            elif key == "Link type":
                result.link_type = value
            elif key == "GID index":
                result.gid_index = int(value) if value.isdigit() else None
        # Two banner fields share a line ("Dual-port : OFF\t\tDevice : mlx5_0").
        device = re.search(r"Device\s*:\s*(\S+)", line)
        if device:
            result.device = device.group(1)
        if "CUDA" in line and ("Picking" in line or "initializing CUDA" in line or "allocated GPU buffer" in line):
            result.cuda = True
        if "using DMA-BUF" in line:
            result.dmabuf = True
        header = _HEADER.search(line)
        if header:
            unit = header.group(1)
            continue
        if unit:
            row = _ROW.match(line)
            if row:
                scale = 1.0 if unit == "Gb/sec" else _MIBPS_TO_GBPS
                result.msg_size = int(row.group(1))
                result.iterations = int(row.group(2))
                result.bw_peak_gbps = round(float(row.group(3)) * scale, 2)
                result.bw_avg_gbps = round(float(row.group(4)) * scale, 2)
        if result.error is None and any(marker in line for marker in _ERRORS):
            result.error = line.strip()
    result.ok = result.bw_avg_gbps is not None and result.error is None
    if result.bw_avg_gbps is None and result.error is None:
        tail = [line.strip() for line in text.splitlines() if line.strip()]
        result.error = f"no result table in ib_write_bw output (last line: {tail[-1][:200] if tail else 'empty'})"
    return result
