"""What one emulated engine is: its role, its model (from the release manifest) and its knobs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from inferplane.emulator.latency import LatencyModel
from inferplane.manifest import KvLayout, ReleaseManifest

EngineRole = Literal["unified", "prefill", "decode", "encoder"]
ROLES: tuple[EngineRole, ...] = ("unified", "prefill", "decode", "encoder")

# SGLang's defaults for the knobs we expose (srt/environ.py, server_args.py).
DEFAULT_BOOTSTRAP_PORT = 8998
DEFAULT_CONTEXT_LENGTH = 32768
DEFAULT_MAX_TOTAL_TOKENS = 500_000


@dataclass(frozen=True)
class ModelIdentity:
    """The model as the release manifest pins it."""

    name: str
    path: str
    served_model_name: str
    revision: str
    config_sha256: str
    tokenizer_sha256: str
    weights_manifest_sha256: str
    kv_layout: KvLayout
    has_image_understanding: bool
    size_bytes: int = 0


@dataclass(frozen=True)
class EngineConfig:
    role: EngineRole
    host: str
    port: int
    model: ModelIdentity
    release: str
    engine_version: str
    bootstrap_port: int | None = None
    max_running_requests: int = 256
    max_total_num_tokens: int = DEFAULT_MAX_TOTAL_TOKENS
    context_length: int = DEFAULT_CONTEXT_LENGTH
    latency: LatencyModel = field(default_factory=LatencyModel)
    mooncake_master: str | None = None
    mooncake_metadata: str = "P2PHANDSHAKE"
    mooncake_local_hostname: str = "127.0.0.1"
    mooncake_segment_bytes: int = 128 << 20
    kv_bytes_cap: int = 256 << 10
    encoder_urls: tuple[str, ...] = ()
    bootstrap_timeout_s: float = 300.0
    waiting_timeout_s: float = 300.0
    health_check_timeout_s: float = 20.0
    drain_poll_s: float = 1.0
    accelerator: str = "NVIDIA H200"

    @property
    def disaggregation_mode(self) -> str:
        """``server_info.disaggregation_mode``: SGLang calls unified ``null`` (no PD)."""
        return self.role if self.role in ("prefill", "decode") else "null"

    @property
    def engine_type(self) -> str:
        """The ``engine_type`` metric label (DisaggregationMode.to_engine_type)."""
        return self.role if self.role in ("prefill", "decode") else "unified"

    @property
    def is_pd(self) -> bool:
        return self.role in ("prefill", "decode")

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.engine_version)

    @property
    def at_least_0_5_23(self) -> bool:
        """The interface changes that matter here landed between 0.5.8 and 0.5.23."""
        return self.version_tuple >= (0, 5, 23)


def version_tuple(version: str) -> tuple[int, ...]:
    """``0.5.23``, ``v0.5.8.post1``, ``0.5.23rc1`` -> (0, 5, 23) style tuples for comparisons."""
    numbers = re.findall(r"\d+", version.lstrip("v").split("+", 1)[0])
    return tuple(int(n) for n in numbers[:3])


def model_from_release(release: ReleaseManifest, role: EngineRole, model: str | None) -> ModelIdentity:
    """The model a role serves: ``model`` if given, else the role's pin (unified: the decode's)."""
    if model is None:
        pinned_role = role if role in release.roles else ("decode" if "decode" in release.roles else next(iter(release.roles)))
        model = release.roles[pinned_role].model  # type: ignore[index]
    if model not in release.models:
        raise KeyError(model)
    m = release.models[model]
    # Vision-language checkpoints are the only ones SGLang accepts behind --encoder-urls.
    vl = any(tag in m.path.lower() or tag in model.lower() for tag in ("-vl", "vl-", "vision"))
    return ModelIdentity(
        name=model,
        path=m.path,
        served_model_name=m.served_model_name,
        revision=m.revision,
        config_sha256=m.config_sha256,
        tokenizer_sha256=m.tokenizer_sha256,
        weights_manifest_sha256=m.weights_manifest_sha256,
        kv_layout=m.kv_layout,
        has_image_understanding=vl,
        size_bytes=m.size_bytes or 0,
    )
