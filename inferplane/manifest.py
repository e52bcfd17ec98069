"""The release manifest: the frozen versions, image digests and model hashes of one release.

It is the single source of truth both engines read: Pulumi takes image digests and chart
versions from it, Ansible takes the expected driver, GPU and model hashes from it. Nothing
here is repeated anywhere else in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferplane.errors import ConfigError, format_validation_error, join_problems

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
IMAGE_RE = re.compile(r"^(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9._-]+)*)@sha256:(?P<hex>[0-9a-f]{64})$")
FLOATING_TAGS = {"latest", "dev", "main", "master", "nightly", "edge", "stable"}

Role = Literal["prefill", "decode", "encoder"]
ROLES: tuple[Role, ...] = ("prefill", "decode", "encoder")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_image_ref(value: str) -> str:
    """Accept ``repo@sha256:<64 hex>`` only: a tag, however specific, can move."""
    if not isinstance(value, str):
        raise ValueError("expected a string 'repo@sha256:<64 hex>'")
    if IMAGE_RE.match(value):
        return value
    if "@" in value:
        digest = value.split("@", 1)[1]
        raise ValueError(
            f"digest '{digest}' is not 'sha256:' followed by 64 lowercase hex characters; copy it from `crane digest` or the registry"
        )
    tag = value.rsplit(":", 1)[1] if ":" in value.rsplit("/", 1)[-1] else ""
    if tag in FLOATING_TAGS:
        raise ValueError(f"tag '{tag}' is not allowed; pin a digest (repo@sha256:...)")
    if tag:
        raise ValueError(f"tag '{tag}' without a digest is not allowed; pin a digest (repo@sha256:...)")
    raise ValueError(f"'{value}' has no digest; pin one (repo@sha256:...)")


def check_sha256(value: str) -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ValueError(f"'{value}' is not a sha256 (64 lowercase hex characters); recompute it with `inferplane manifest hash-model DIR`")
    return value


def check_commit(value: str) -> str:
    if not isinstance(value, str) or not COMMIT_RE.match(value):
        raise ValueError(f"'{value}' is not a commit; a branch or tag name moves, pin the 40-hex commit of the model repository")
    return value


ImageRef = Annotated[str, Field(description="repo@sha256:<64 hex>")]
Sha256 = Annotated[str, Field(description="64 lowercase hex characters")]
Version = Annotated[str, Field(min_length=1, pattern=r"^v?[0-9][0-9A-Za-z.+_-]*$")]


class Runtime(_Strict):
    sglang_version: Version
    # The engine image: upstream SGLang plus the inferplane launcher (images/worker/Containerfile).
    sglang_image: ImageRef
    smg_version: Version
    smg_image: ImageRef
    mooncake_version: Version
    mooncake_image: ImageRef
    mooncake_te_abi: str = Field(min_length=1, description="transfer-engine wire ABI; P and D must match")
    etcd_image: ImageRef

    _img = field_validator("sglang_image", "smg_image", "mooncake_image", "etcd_image")(check_image_ref)


class GpuStack(_Strict):
    gpu_model: str = Field(min_length=1, description="as nvidia-smi names it, e.g. 'NVIDIA H200'")
    gpu_memory_mib: int = Field(gt=0, description="memory.total per GPU as nvidia-smi reports it")
    driver_version: Version
    cuda_version: Version
    nccl_version: Version
    ofed_version: Version | None = Field(default=None, description="MLNX_OFED or DOCA-OFED version on the nodes")
    doca_version: Version | None = None
    kernel_version_prefix: str | None = Field(default=None, description="e.g. '6.8.' ; checked by preflight when set")


class HelmChart(_Strict):
    chart: str = Field(min_length=1)
    repository: str = Field(min_length=1, pattern=r"^(https://|oci://)")
    version: Version

    @field_validator("version")
    @classmethod
    def _no_floating(cls, v: str) -> str:
        if v in FLOATING_TAGS:
            raise ValueError(f"chart version '{v}' floats; pin an exact chart version")
        return v


class ComponentRef(_Strict):
    """A component shipped outside Helm (kustomize, plain manifests): an image pinned by digest."""

    version: Version
    image: ImageRef

    _img = field_validator("image")(check_image_ref)


class Addons(_Strict):
    gpu_operator: HelmChart
    network_operator: HelmChart | None = None
    rdma_shared_device_plugin: ComponentRef
    lws: HelmChart
    volcano: HelmChart
    fluid: HelmChart
    kube_prometheus_stack: HelmChart
    etcd: ComponentRef


class KvLayout(_Strict):
    """What the KV cache looks like in memory; P and D must agree byte for byte."""

    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"] = "auto"
    page_size: int = Field(default=1, ge=1)
    num_layers: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)


class LoraAdapter(_Strict):
    name: str = Field(min_length=1)
    revision: str
    sha256: str

    _rev = field_validator("revision")(check_commit)
    _sha = field_validator("sha256")(check_sha256)


class Model(_Strict):
    path: str = Field(min_length=1, description="directory the engine loads, e.g. /models/Qwen3-8B")
    served_model_name: str = Field(min_length=1)
    source: str = Field(min_length=1, description="where warm-up copies from: s3://bucket/prefix or a POSIX path")
    revision: str
    config_sha256: str
    tokenizer_sha256: str
    weights_manifest_sha256: str
    quantization: Literal["none", "fp8", "w8a8_fp8", "w8a8_int8", "awq", "gptq", "mxfp4"] = "none"
    kv_layout: KvLayout
    lora_adapters: tuple[LoraAdapter, ...] = ()
    size_bytes: int | None = Field(default=None, ge=0, description="total weight bytes; warm-up checks free space")

    _rev = field_validator("revision")(check_commit)
    _sha = field_validator("config_sha256", "tokenizer_sha256", "weights_manifest_sha256")(check_sha256)


class RolePin(_Strict):
    """What one disaggregated role runs. Unset fields take the runtime's value."""

    model: str
    sglang_version: Version | None = None
    sglang_image: ImageRef | None = None
    mooncake_te_abi: str | None = None
    lora_adapters: tuple[str, ...] | None = Field(default=None, description="adapter names; default all of the model's")

    @field_validator("sglang_image")
    @classmethod
    def _img(cls, v: str | None) -> str | None:
        return None if v is None else check_image_ref(v)


class EffectiveRole(_Strict):
    """A role with every inherited value resolved: what actually runs."""

    role: str
    model_name: str
    model: Model
    sglang_version: str
    sglang_image: str
    mooncake_te_abi: str
    lora_adapters: tuple[str, ...]


class ReleaseManifest(_Strict):
    schema_version: Literal[1]
    release: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    runtime: Runtime
    gpu_stack: GpuStack
    addons: Addons
    models: dict[str, Model] = Field(min_length=1)
    roles: dict[Role, RolePin] = Field(min_length=1)

    @model_validator(mode="after")
    def _roles_agree(self) -> ReleaseManifest:
        problems: list[str] = []
        for role, pin in self.roles.items():
            if pin.model not in self.models:
                problems.append(f"roles.{role}.model: '{pin.model}' is not in models ({', '.join(sorted(self.models))}); name one of them")
                continue
            if pin.lora_adapters is not None:
                known = {a.name for a in self.models[pin.model].lora_adapters}
                for name in pin.lora_adapters:
                    if name not in known:
                        problems.append(f"roles.{role}.lora_adapters: '{name}' is not an adapter of model '{pin.model}'")
        if problems:
            raise ValueError(join_problems(problems))
        problems = compatibility_problems({r: self.effective(r) for r in self.roles})
        if problems:
            raise ValueError(join_problems(problems))
        return self

    def effective(self, role: str) -> EffectiveRole:
        pin = self.roles[role]  # type: ignore[index]
        model = self.models[pin.model]
        loras = pin.lora_adapters if pin.lora_adapters is not None else tuple(a.name for a in model.lora_adapters)
        return EffectiveRole(
            role=role,
            model_name=pin.model,
            model=model,
            sglang_version=pin.sglang_version or self.runtime.sglang_version,
            sglang_image=pin.sglang_image or self.runtime.sglang_image,
            mooncake_te_abi=pin.mooncake_te_abi or self.runtime.mooncake_te_abi,
            lora_adapters=tuple(sorted(loras)),
        )


# What prefill, decode and encoder must share. The encoder produces embeddings, not KV,
# so the KV layout is compared between prefill and decode only.
_SHARED: tuple[tuple[str, str, bool], ...] = (
    ("model revision", "model.revision", True),
    ("tokenizer", "model.tokenizer_sha256", True),
    ("quantization", "model.quantization", True),
    ("KV layout", "model.kv_layout", False),
    ("LoRA set", "lora_adapters", True),
    ("SGLang version", "sglang_version", True),
    ("Mooncake transfer-engine ABI", "mooncake_te_abi", True),
)


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _show(value: Any) -> str:
    if isinstance(value, BaseModel):
        return ",".join(f"{k}={v}" for k, v in value.model_dump().items())
    if isinstance(value, tuple):
        return "[" + ",".join(value) + "]"
    return str(value)


def compatibility_problems(roles: dict[str, EffectiveRole]) -> list[str]:
    """Every way the given roles could not serve together. Also used against running peers."""
    problems: list[str] = []
    names = sorted(roles, key=lambda r: ROLES.index(r) if r in ROLES else 99)
    for label, attr, with_encoder in _SHARED:
        members = [r for r in names if with_encoder or r != "encoder"]
        if len(members) < 2:
            continue
        ref = members[0]
        ref_value = _show(_get(roles[ref], attr))
        for other in members[1:]:
            value = _show(_get(roles[other], attr))
            if value != ref_value:
                problems.append(
                    f"roles.{other}: {label} {value} differs from {ref}'s {ref_value}; P/D/E must match: "
                    f"roll them together or switch with playbooks/switch-model.yml (blue/green)"
                )
    return problems


def load_release(path: str | Path) -> ReleaseManifest:
    """Load and validate a release manifest; raise ConfigError with one line per problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"(file): cannot read: {exc.strerror}; check the path"]) from None
    return parse_release(text, str(path))


def parse_release(text: str, source: str = "<release>") -> ReleaseManifest:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(document)"
        raise ConfigError(source, [f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}); fix the syntax"]) from None
    if not isinstance(data, dict):
        raise ConfigError(
            source, [f"(document): expected a mapping with schema_version, release, runtime, ... (got {type(data).__name__})"]
        )
    try:
        return ReleaseManifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, format_validation_error(exc)) from None
