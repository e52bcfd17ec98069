"""Names and ports of every local process: base_port plus a fixed offset each.

Fixed offsets keep a group's URL stable across `group restart` (SMG's registration is by URL,
exactly as a recreated LWS group keeps its Service name) and make one ``--base-port`` enough to
move the whole platform out of another's way. Consumers read the ports from state.json; the
table here is the only place that computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplane.local.config import ENGINE_ROLES, MAX_GROUPS_PER_ROLE, EngineRole, LocalPlatformConfig

HOST = "127.0.0.1"  # loopback only: nothing local is reachable from outside the machine

# Offsets from base_port.
ETCD_CLIENT, ETCD_PEER = 0, 5
MASTER_RPC, MASTER_METRICS = 10, 15
METADATA, S3, PROMETHEUS = 20, 21, 22
SMG, SMG_METRICS = 30, 31
# The front (what clients address; the local stand-in for the gateway's Kubernetes Service) and
# extra gateways (a blue/green switch runs a second SMG for the new set): 2 ports each.
FRONT = 32
EXTRA_GATEWAYS, MAX_EXTRA_GATEWAYS = 40, 10
ROLE_BLOCK = {"prefill": 100, "decode": 200, "encoder": 300}  # each role: 2 ports per group
SPAN = 100 + 3 * 2 * MAX_GROUPS_PER_ROLE


@dataclass(frozen=True)
class GroupSlot:
    name: str
    role: EngineRole
    index: int
    port: int
    bootstrap_port: int | None  # prefill only

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass(frozen=True)
class Layout:
    base_port: int
    etcd_members: int
    masters: int
    metadata_server: bool
    groups: tuple[GroupSlot, ...]

    @classmethod
    def of(cls, cfg: LocalPlatformConfig, base_port: int | None = None) -> Layout:
        base = cfg.base_port if base_port is None else base_port
        slots: list[GroupSlot] = []
        for role in ENGINE_ROLES:
            for i in range(cfg.groups.count(role)):
                port = base + ROLE_BLOCK[role] + 2 * i
                slots.append(GroupSlot(f"{role}-{i}", role, i, port, port + 1 if role == "prefill" else None))
        return cls(base, cfg.etcd_members, cfg.mooncake.masters, cfg.mooncake.metadata == "http", tuple(slots))

    def etcd_client(self, i: int) -> int:
        return self.base_port + ETCD_CLIENT + i

    def etcd_peer(self, i: int) -> int:
        return self.base_port + ETCD_PEER + i

    def master_rpc(self, i: int) -> int:
        return self.base_port + MASTER_RPC + i

    def master_metrics(self, i: int) -> int:
        return self.base_port + MASTER_METRICS + i

    @property
    def metadata(self) -> int:
        return self.base_port + METADATA

    @property
    def s3(self) -> int:
        return self.base_port + S3

    @property
    def prometheus(self) -> int:
        return self.base_port + PROMETHEUS

    @property
    def smg(self) -> int:
        return self.base_port + SMG

    @property
    def smg_metrics(self) -> int:
        return self.base_port + SMG_METRICS

    @property
    def front(self) -> int:
        return self.base_port + FRONT

    def extra_gateway(self, index: int) -> tuple[int, int]:
        """(http, metrics) port of extra gateway slot ``index``."""
        if not 0 <= index < MAX_EXTRA_GATEWAYS:
            raise KeyError(f"extra gateway slot {index}: only {MAX_EXTRA_GATEWAYS} exist")
        port = self.base_port + EXTRA_GATEWAYS + 2 * index
        return port, port + 1

    def slot(self, role: EngineRole, index: int) -> GroupSlot:
        """Any group of a role, configured or added later (`local group add`): same port rule."""
        if not 0 <= index < MAX_GROUPS_PER_ROLE:
            raise KeyError(f"{role}-{index}: at most {MAX_GROUPS_PER_ROLE} groups per role")
        port = self.base_port + ROLE_BLOCK[role] + 2 * index
        return GroupSlot(f"{role}-{index}", role, index, port, port + 1 if role == "prefill" else None)

    def group(self, name: str) -> GroupSlot:
        for slot in self.groups:
            if slot.name == name:
                return slot
        role, _, index = name.rpartition("-")
        if role in ENGINE_ROLES and index.isdigit():
            return self.slot(role, int(index))  # type: ignore[arg-type]
        raise KeyError(name)

    def ports(self) -> dict[str, dict[str, int]]:
        """Every listening port by process name and purpose."""
        out: dict[str, dict[str, int]] = {}
        for i in range(self.etcd_members):
            out[f"etcd-{i}"] = {"client": self.etcd_client(i), "peer": self.etcd_peer(i)}
        for i in range(self.masters):
            out[f"mooncake-master-{i}"] = {"rpc": self.master_rpc(i), "metrics": self.master_metrics(i)}
        if self.metadata_server:
            out["mooncake-metadata"] = {"http": self.metadata}
        out["s3"] = {"http": self.s3}
        out["prometheus"] = {"http": self.prometheus}
        out["smg"] = {"http": self.smg, "metrics": self.smg_metrics}
        out["front"] = {"http": self.front}
        for slot in self.groups:
            out[slot.name] = {"http": slot.port} | ({"bootstrap": slot.bootstrap_port} if slot.bootstrap_port else {})
        return out
