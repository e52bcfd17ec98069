"""Parse ``nvidia-smi nvlink -s`` (link status per GPU).

::

    GPU 0: NVIDIA H200 (UUID: GPU-...)
             Link 0: 26.562 GB/s
             Link 1: <inactive>

A GPU without NVLink peers prints nothing at all (the real single-H200 capture is empty), so an
empty output means "no links", not "could not tell".

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GPU = re.compile(r"^\s*GPU\s+(\d+)\s*:\s*(.*?)\s*(?:\(UUID:\s*([^)]+)\))?\s*$")
_LINK = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$")
_SPEED = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*GB/s", re.IGNORECASE)


@dataclass
class Link:
    index: int
    active: bool
    speed_gbytes: float | None
    raw: str


@dataclass
class GpuLinks:
    index: int
    name: str
    uuid: str | None
    links: list[Link]

    @property
    def active(self) -> list[int]:
        return [link.index for link in self.links if link.active]

    @property
    def inactive(self) -> list[int]:
        return [link.index for link in self.links if not link.active]


def parse_nvlink_status(text: str) -> dict[int, GpuLinks]:
    gpus: dict[int, GpuLinks] = {}
    current: GpuLinks | None = None
    for line in text.splitlines():
        link = _LINK.match(line)
        if link and current is not None:
            raw = link.group(2)
            speed = _SPEED.search(raw)
            # Anything but a speed ("<inactive>", "Disabled", "0 GB/s") means the link carries nothing.
            gbytes = float(speed.group(1)) if speed else None
            active = gbytes is not None and gbytes > 0
            current.links.append(Link(int(link.group(1)), active, gbytes, raw))
            continue
        gpu = _GPU.match(line)
        if gpu:
            current = GpuLinks(int(gpu.group(1)), gpu.group(2), gpu.group(3), [])
            gpus[current.index] = current
    return gpus
