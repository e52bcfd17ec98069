"""What the local platform looks like: ``local_platform`` in inventories/local/group_vars/all/local_platform.yml.

The same file is the Ansible inventory's description of the platform, so a runbook rehearsed
here and the ``inferplane local`` command read one set of sizes, ports and knobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from inferplane.errors import ConfigError, format_validation_error
from inferplane.spec import REPO_ROOT, Gateway, Thresholds

CONFIG_FILE = REPO_ROOT / "inventories" / "local" / "group_vars" / "all" / "local_platform.yml"
CONFIG_KEY = "local_platform"
EngineRole = Literal["prefill", "decode", "encoder"]
ENGINE_ROLES: tuple[EngineRole, ...] = ("prefill", "decode", "encoder")
MAX_GROUPS_PER_ROLE = 50


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Groups(_Strict):
    """Emulated engine groups per role: the local stand-in for LWS replicas."""

    prefill: int = Field(default=2, ge=1, le=MAX_GROUPS_PER_ROLE)
    decode: int = Field(default=2, ge=1, le=MAX_GROUPS_PER_ROLE)
    encoder: int = Field(default=0, ge=0, le=MAX_GROUPS_PER_ROLE, description="EPD: the prefills reach these via --encoder-urls")

    def count(self, role: EngineRole) -> int:
        return int(getattr(self, role))


class Emulator(_Strict):
    """Flags every `inferplane emulator` process gets: capacity and the latency model.

    The emulator's own defaults are tuned for fast unit tests; these are an engine's orders of
    magnitude (an 8B model on one H200), so TTFT, TPOT and queueing look like a real deployment's.
    """

    max_running_requests: int = Field(default=32, ge=1)
    prefill_tokens_per_s: float = Field(default=8000.0, gt=0)
    prefill_overhead_ms: float = Field(default=15.0, ge=0)
    itl_ms: float = Field(default=8.0, ge=0, description="decode step time with one running request")
    itl_per_running_ms: float = Field(default=0.2, ge=0, description="added step time per extra running request")
    encode_ms_per_item: float = Field(default=30.0, ge=0)
    mooncake_segment_mb: int = Field(default=64, ge=16, description="memory each engine's store client lends Mooncake")
    args: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="any other `inferplane emulator` flag, without the leading '--'"
    )

    def argv(self) -> list[str]:
        out: list[str] = []
        for name in (
            "max_running_requests",
            "prefill_tokens_per_s",
            "prefill_overhead_ms",
            "itl_ms",
            "itl_per_running_ms",
            "encode_ms_per_item",
            "mooncake_segment_mb",
        ):
            out += ["--" + name.replace("_", "-"), str(getattr(self, name))]
        for flag, value in self.args.items():
            if isinstance(value, bool):
                if value:
                    out.append(f"--{flag}")
                continue
            out += [f"--{flag}", str(value)]
        return out


class Mooncake(_Strict):
    masters: int = Field(default=2, ge=1, le=3, description="mooncake_master processes in HA on the local etcd")
    cluster_id: str = Field(default="inferplane_local", pattern=r"^[A-Za-z0-9_-]+$")
    metadata: Literal["http", "p2phandshake"] = Field(
        default="http", description="transfer-engine metadata: a mooncake_http_metadata_server, or P2PHANDSHAKE (no server)"
    )


class Observability(_Strict):
    scrape_interval: str = Field(default="1s", pattern=r"^[0-9]+(ms|s|m)$")
    evaluation_interval: str = Field(default="1s", pattern=r"^[0-9]+(ms|s|m)$")
    thresholds: Thresholds = Thresholds(for_duration="5s")
    max_for: str = Field(
        default="5s",
        pattern=r"^[0-9]+(ms|s|m)$",
        description="every alert's `for` is capped at this locally, so drills see alerts fire within seconds",
    )


class LocalPlatformConfig(_Strict):
    state_dir: str = Field(default=".state/local", description="relative paths are under the repository root")
    base_port: int = Field(default=31000, ge=1024, le=65535 - 400, description="every port is base_port + a fixed offset")
    release: str = Field(default="releases/local.yaml", description="the release every group starts on")
    model: str | None = Field(default=None, description="model in the release; default the prefill role's")
    etcd_members: int = Field(default=3, ge=1, le=5)
    groups: Groups = Groups()
    emulator: Emulator = Emulator()
    mooncake: Mooncake = Mooncake()
    gateway: Gateway = Gateway(
        prefill_policy="round_robin",
        decode_policy="round_robin",
        health_check_interval_secs=2,
        drain_settle_secs=5,
        request_timeout_secs=300,
    )
    gateway_admin_key: bool = Field(default=True, description="run SMG with a control-plane admin key, as production does")
    observability: Observability = Observability()
    startup_timeout_seconds: int = Field(default=90, ge=5)

    @field_validator("etcd_members")
    @classmethod
    def _odd_etcd(cls, n: int) -> int:
        if n % 2 == 0:
            raise ValueError(f"{n} members tolerate no more failures than {n - 1}; use 1, 3 or 5")
        return n

    def resolve(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else REPO_ROOT / p

    @property
    def state_path(self) -> Path:
        return self.resolve(self.state_dir)

    @property
    def release_path(self) -> Path:
        return self.resolve(self.release)


def parse_config(data: Any, source: str = str(CONFIG_FILE)) -> LocalPlatformConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"{CONFIG_KEY}: expected a mapping (got {type(data).__name__})"])
    try:
        return LocalPlatformConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, format_validation_error(exc, prefix=CONFIG_KEY)) from None


def load_config(path: Path | None = None, **overrides: Any) -> LocalPlatformConfig:
    """Read ``local_platform`` from the inventory; ``overrides`` (e.g. state_dir, base_port) win."""
    path = path or CONFIG_FILE
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(str(path), [f"(document): not valid YAML ({exc}); fix the syntax"]) from None
        section = doc.get(CONFIG_KEY) if isinstance(doc, dict) else None
        if section is not None and not isinstance(section, dict):
            raise ConfigError(str(path), [f"{CONFIG_KEY}: expected a mapping (got {type(section).__name__})"])
        data = dict(section or {})
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_config(data, str(path))
