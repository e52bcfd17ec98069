"""``<state-dir>/state.json``: what `inferplane local up` started and where everything listens.

Runbooks, tests and `status` read endpoints from here and never compute ports themselves.
Writes are atomic (rename) and serialised by a lock file, so concurrent `local` commands
cannot lose each other's updates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.local.proc import Identity

STATE_FILE = "state.json"
ProcKind = Literal["etcd", "mooncake-master", "mooncake-metadata", "s3", "prometheus", "smg", "engine", "front"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Process(_Model):
    name: str
    kind: ProcKind
    pid: int | None = Field(default=None, description="None once stopped")
    starttime: int | None = Field(default=None, description="kernel start time (clock ticks since boot): PID reuse guard")
    cmd: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="variables set on top of the caller's environment")
    log: str
    ports: dict[str, int] = Field(default_factory=dict)
    health_url: str | None = None
    desired: Literal["running", "stopped", "paused"] = "running"

    def identity(self) -> Identity | None:
        if self.pid is None or self.starttime is None:
            return None
        return Identity(self.pid, self.starttime, tuple(self.cmd[1:]))


class Group(_Model):
    """One emulated engine group: the local stand-in for an LWS group."""

    name: str
    role: Literal["prefill", "decode", "encoder"]
    url: str
    bootstrap_port: int | None = None
    version: str = Field(description="SGLang version the emulator reports")
    release: str = Field(description="release manifest the group runs")
    model: str


class Gateway(_Model):
    url: str
    metrics_url: str
    admin_key: str | None = Field(default=None, description="SMG control-plane admin key (Authorization: Bearer ...)")
    process: str = Field(default="smg", description="its process in `processes`")
    groups: list[str] | None = Field(default=None, description="engine groups it starts with; None: the configured groups")


class Front(_Model):
    """What clients address: routes each new request to a gateway by weight (a Service's selector,
    an ingress split). Requests already sent finish where they are."""

    url: str
    targets_file: str = Field(description="JSON the front re-reads: gateway name -> {url, weight}")
    weights: dict[str, int] = Field(description="gateway name ('smg' or an extra gateway's) -> share of new requests")


class MooncakeMaster(_Model):
    name: str
    rpc_address: str
    metrics_url: str
    health_url: str


class Mooncake(_Model):
    cluster_id: str
    master_address: str = Field(description="etcd://h1:p1;h2:p2 ... : what store clients pass as master_server_addr")
    metadata_url: str = Field(description="transfer-engine metadata: http://.../metadata or P2PHANDSHAKE")
    masters: list[MooncakeMaster]


class Etcd(_Model):
    endpoints: list[str] = Field(description="host:port client endpoints")

    @property
    def urls(self) -> list[str]:
        return [f"http://{e}" for e in self.endpoints]


class S3(_Model):
    endpoint: str
    bucket: str
    prefix: str
    region: str = "us-east-1"
    access_key_id: str = "inferplane"
    secret_access_key: str = "inferplane"


class Endpoints(_Model):
    gateway: Gateway
    etcd: Etcd
    mooncake: Mooncake
    prometheus: str
    s3: S3
    front: Front | None = None
    gateways: dict[str, Gateway] = Field(default_factory=dict, description="extra gateways by name (blue/green), besides `gateway`")

    def gateway_named(self, name: str) -> Gateway:
        """'smg' is the platform's own gateway; any other name an extra one."""
        if name == "smg":
            return self.gateway
        try:
            return self.gateways[name]
        except KeyError:
            raise KeyError(f"no gateway '{name}'; known: {', '.join(['smg', *self.gateways])}") from None


class State(_Model):
    schema_version: Literal[1] = 1
    state_dir: str
    base_port: int
    model: str
    release: str = Field(description="the platform's baseline release")
    processes: dict[str, Process] = Field(default_factory=dict)
    groups: dict[str, Group] = Field(default_factory=dict)
    endpoints: Endpoints

    def process(self, name: str) -> Process:
        try:
            return self.processes[name]
        except KeyError:
            raise KeyError(f"no process '{name}' in {self.state_dir}; known: {', '.join(self.processes)}") from None

    def groups_of(self, role: str) -> list[Group]:
        return [g for g in self.groups.values() if g.role == role]


def state_file(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load(state_dir: Path) -> State | None:
    path = state_file(state_dir)
    if not path.is_file():
        return None
    return State.model_validate_json(path.read_text())


def save(state: State) -> None:
    path = state_file(Path(state.state_dir))
    tmp = path.with_suffix(".json.tmp")
    # The admin key lives here: readable by the owner only.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(state.model_dump(mode="json"), indent=2) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
