"""Parse Mooncake ``transfer_engine_bench`` logs: which transport carried the bytes, and how fast.

The transfer engine installs one transport per process and says so in its glog lines:

- RDMA: ``rdma_context.cpp:...] RDMA device: mlx5_0, LID: 0, GID: (GID_Index 3) ...`` per opened
  HCA (and, on newer builds, ``Using RDMA transport``).
- TCP: ``tcp_transport.cpp:...] TcpTransport: listen on port N`` (newer builds also log
  ``Using TCP transport (no HCA detected)``).
- The silent fallback: with auto discovery and no usable HCA the engine logs
  ``Topology discovery complete. Found 0 HCAs.`` and installs TCP; KV transfer then "works" at a
  fraction of the bandwidth. With ``--protocol=rdma`` and no usable device it logs
  ``RdmaTransport: No available RNIC``.

The initiator ends with ``Test completed: duration 10.00, batch count N, throughput X GB/s``; the
target prints ``Transfer Engine RPC using P2P handshake, listening on HOST:PORT`` (the segment id
initiators address). Recorded from a real run: tests/fixtures/preflight/mooncake/.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

_RDMA_DEVICE = re.compile(r"RDMA device:\s*([^,\s]+)")
_HCAS = re.compile(r"Found (\d+) HCAs")
_LISTEN = re.compile(r"listening on (\S+?:\d+)")
_DONE = re.compile(r"Test completed: duration ([0-9.]+), batch count (\d+), throughput ([0-9.]+) (\S+)")
_UNIT_TO_GBYTES = {"GB/s": 1.0, "GiB/s": 1.073741824, "Gb/s": 0.125, "MB/s": 0.001, "MiB/s": 0.001048576, "Mb/s": 0.000125}
_ERRORS = ("No available RNIC", "cannot initialize RDMA resources", "Unable to get target segment", "Failed to", "Transfer failed")


@dataclass
class TeRun:
    transport: str | None = None
    rdma_devices: list[str] = field(default_factory=list)
    hcas_found: int | None = None
    segment: str | None = None
    completed: bool = False
    duration_s: float | None = None
    batches: int | None = None
    throughput_gbytes: float | None = None
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def parse_te_bench(text: str) -> TeRun:
    run = TeRun()
    tcp = rdma = False
    for line in text.splitlines():
        if "TcpTransport" in line or "Using TCP transport" in line:
            tcp = True
        device = _RDMA_DEVICE.search(line)
        if device:
            rdma = True
            if device.group(1) not in run.rdma_devices:
                run.rdma_devices.append(device.group(1))
        if "Using RDMA transport" in line:
            rdma = True
        hcas = _HCAS.search(line)
        if hcas:
            run.hcas_found = int(hcas.group(1))
        listen = _LISTEN.search(line)
        if listen and run.segment is None:
            run.segment = listen.group(1)
        done = _DONE.search(line)
        if done:
            run.completed = True
            run.duration_s = float(done.group(1))
            run.batches = int(done.group(2))
            run.throughput_gbytes = round(float(done.group(3)) * _UNIT_TO_GBYTES.get(done.group(4), 1.0), 3)
        if any(marker in line for marker in _ERRORS):
            # Keep the message after glog's "file.cpp:NNN] " prefix.
            run.errors.append(line.split("] ", 1)[-1].strip())
    # A process that installed TCP moves its bytes over TCP, whatever else it logged.
    run.transport = "tcp" if tcp else ("rdma" if rdma else None)
    return run
