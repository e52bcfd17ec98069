"""Parse ``ibv_devices`` and ``ibv_devinfo -v`` (rdma-core's libibverbs/examples/devinfo.c).

``ibv_devinfo -v`` prints, per HCA, ``hca_id:`` then tab-indented ``key: value`` device attributes,
then one ``port:`` block per port with ``state: PORT_ACTIVE (4)``, ``active_mtu: 4096 (5)``,
``link_layer: Ethernet`` and, with ``-v``, the GID table::

                        GID[  3]:		::ffff:10.1.0.11, RoCE v2

With no HCA it prints ``No IB devices found`` (and exits non-zero on some versions).

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

NO_DEVICES = "No IB devices found"
_HCA = re.compile(r"^hca_id:\s*(\S+)")
_PORT = re.compile(r"^\s*port:\s*(\d+)")
_KV = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ ]*?):\s*(.*?)\s*$")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*(\S+?)(?:,\s*(.+?))?\s*$")
_ENUM = re.compile(r"^(.*?)\s*\((-?\d+)\)$")


@dataclass
class Gid:
    index: int
    gid: str
    type: str | None


@dataclass
class Port:
    number: int
    state: str | None = None
    phys_state: str | None = None
    max_mtu: int | None = None
    active_mtu: int | None = None
    link_layer: str | None = None
    active_width: str | None = None
    active_speed: str | None = None
    gids: dict[int, Gid] = field(default_factory=dict)

    @property
    def is_active(self) -> bool:
        return self.state == "PORT_ACTIVE"


@dataclass
class Hca:
    name: str
    transport: str | None = None
    fw_ver: str | None = None
    vendor_id: str | None = None
    vendor_part_id: str | None = None
    board_id: str | None = None
    ports: list[Port] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _enum_name(value: str) -> str:
    """``PORT_ACTIVE (4)`` -> ``PORT_ACTIVE``."""
    match = _ENUM.match(value)
    return match.group(1) if match else value


def _mtu(value: str) -> int | None:
    name = _enum_name(value)
    return int(name) if name.isdigit() else None


_DEVICE_KEYS = {
    "transport": "transport",
    "fw_ver": "fw_ver",
    "vendor_id": "vendor_id",
    "vendor_part_id": "vendor_part_id",
    "board_id": "board_id",
}


def parse_ibv_devinfo(text: str) -> list[Hca]:
    hcas: list[Hca] = []
    hca: Hca | None = None
    port: Port | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _HCA.match(line)
        if match:
            hca = Hca(name=match.group(1))
            hcas.append(hca)
            port = None
            continue
        if hca is None:
            continue
        match = _PORT.match(line)
        if match:
            port = Port(number=int(match.group(1)))
            hca.ports.append(port)
            continue
        match = _GID.match(line)
        if match and port is not None:
            index = int(match.group(1))
            port.gids[index] = Gid(index, match.group(2), match.group(3))
            continue
        match = _KV.match(line)
        if not match:
            continue
        key, value = match.group(1).strip(), match.group(2)
        if port is None:
            attr = _DEVICE_KEYS.get(key)
            if attr:
                setattr(hca, attr, _enum_name(value) if attr == "transport" else value)
        elif key == "state":
            port.state = _enum_name(value)
        elif key == "phys_state":
            port.phys_state = _enum_name(value)
        elif key == "max_mtu":
            port.max_mtu = _mtu(value)
        elif key == "active_mtu":
            port.active_mtu = _mtu(value)
        elif key == "link_layer":
            port.link_layer = value
        elif key == "active_width":
            port.active_width = _enum_name(value)
        elif key == "active_speed":
            port.active_speed = _enum_name(value)
    return hcas


def parse_ibv_devices(text: str) -> list[tuple[str, str]]:
    """``ibv_devices`` -> [(device, node GUID)]."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] not in ("device", "------"):
            out.append((parts[0], parts[1]))
    return out
