"""PlatformSpec: one stack's desired platform (stacks/Pulumi.<stack>.yaml, key ``inferplane:platform``).

Read by the Pulumi program through ``pulumi.Config().require_object("platform")`` and by the
CLI from the same file, so `inferplane spec check` and `pulumi up` can never disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferplane.errors import ConfigError, format_validation_error, join_problems
from inferplane.manifest import ReleaseManifest, load_release

PROJECT = "inferplane"
REPO_ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO_ROOT / "stacks"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")]


class Pool(_Strict):
    """One role's pool: ``groups`` LWS groups of ``nodes_per_group`` nodes each."""

    model: str = Field(description="model name in the release manifest")
    groups: int = Field(ge=0, description="LWS replicas: independent serving groups")
    min_groups: int = Field(default=1, ge=0, description="upgrade never takes the pool below this many serving groups")
    nodes_per_group: int = Field(default=1, ge=1, description="LWS size: pods (one per node) per group")
    gpus_per_node: int = Field(default=8, ge=1, le=16)
    tp: int = Field(ge=1, description="tensor parallel size across the whole group")
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    dp_attention: bool = False
    moe_a2a_backend: Literal["none", "deepep", "mooncake"] = "none"
    deepep_mode: Literal["auto", "normal", "low_latency"] | None = None
    chunked_prefill_size: int | None = Field(default=None, ge=1)
    max_running_requests: int | None = Field(default=None, ge=1)
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1)
    enable_hisparse: bool = Field(default=False, description="HiSparse attention; opt-in only")
    port: int = Field(default=30000, ge=1, le=65535)
    bootstrap_port: int = Field(default=8998, ge=1, le=65535, description="prefill only: KV bootstrap server")
    shm_size: Quantity = "64Gi"
    rdma_resource: str | None = Field(default=None, description="name of an rdma.resources entry")
    ib_device: str | None = Field(default=None, description="--disaggregation-ib-device, e.g. mlx5_0,mlx5_1")
    cpu: Quantity = "32"
    memory: Quantity = "512Gi"
    startup_timeout_seconds: int = Field(default=1800, ge=60, description="weight loading budget for the startup probe")
    extra_args: tuple[str, ...] = ()

    @property
    def gpus_per_group(self) -> int:
        return self.nodes_per_group * self.gpus_per_node

    @model_validator(mode="after")
    def _parallelism(self) -> Pool:
        gpus = self.gpus_per_group
        # SGLang's convention: with DP attention, tp spans the group and dp splits attention
        # inside it; without, dp replicas of tp GPUs each.
        if self.dp_attention:
            if self.tp != gpus:
                raise ValueError(
                    f"@tp: tp={self.tp} with dp_attention must equal the group's GPUs ({self.nodes_per_group} nodes x {self.gpus_per_node} = {gpus})"
                )
            if self.tp % self.dp:
                raise ValueError(f"@dp: dp={self.dp} must divide tp={self.tp} when dp_attention is on")
        elif self.tp * self.dp != gpus:
            raise ValueError(
                f"@tp: tp*dp = {self.tp}*{self.dp} = {self.tp * self.dp} does not match the group's GPUs "
                f"({self.nodes_per_group} nodes x {self.gpus_per_node} = {gpus}); change tp/dp or the group shape"
            )
        if self.ep > 1 and self.tp % self.ep:
            raise ValueError(f"@ep: ep={self.ep} must divide tp={self.tp}")
        if self.min_groups > self.groups:
            raise ValueError(f"@min_groups: min_groups={self.min_groups} exceeds groups={self.groups}")
        return self


class Pools(_Strict):
    prefill: Pool
    decode: Pool
    encoder: Pool | None = None

    def items(self) -> list[tuple[str, Pool]]:
        return [(n, p) for n, p in (("encoder", self.encoder), ("prefill", self.prefill), ("decode", self.decode)) if p is not None]


# SGLang 0.5.23's accepted values (srt/disaggregation/mooncake/utils.py); an empty value is not "unset" there.
CustomMemPool = Literal["NVLINK", "BAREX", "INTRA_NODE_NVLINK"]


class MooncakePoc(_Strict):
    mode: Literal["poc"]
    rpc_port: int = 50051
    metadata_port: int = 8080
    metrics_port: int = 9003
    protocol: Literal["rdma", "tcp"] = "rdma"
    metadata_server: str | None = Field(default=None, description="override; default the master's embedded HTTP metadata server")
    store: MooncakeStore | None = None
    custom_mem_pool: CustomMemPool | None = Field(default=None, description="SGLANG_MOONCAKE_CUSTOM_MEM_POOL; unset for RDMA across nodes")
    intranode_nvlink: bool = Field(default=False, description="MC_INTRANODE_NVLINK: KV over NVLink when P and D share a node")


class MooncakeHa(_Strict):
    mode: Literal["ha"]
    masters: int = Field(default=2, ge=2, le=5)
    rpc_port: int = 50051
    metrics_port: int = 9003
    metadata_port: int = 8080
    protocol: Literal["rdma", "tcp"] = "rdma"
    cluster_id: str = Field(default="mooncake_cluster", pattern=r"^[A-Za-z0-9_-]+$")
    oplog: bool = True
    etcd_endpoints: tuple[str, ...] = Field(default=(), description="host:port; empty means the in-cluster etcd StatefulSet")
    metadata_server: str | None = None
    store: MooncakeStore | None = None
    custom_mem_pool: CustomMemPool | None = Field(default=None, description="SGLANG_MOONCAKE_CUSTOM_MEM_POOL; unset for RDMA across nodes")
    intranode_nvlink: bool = Field(default=False, description="MC_INTRANODE_NVLINK: KV over NVLink when P and D share a node")

    @model_validator(mode="after")
    def _oplog(self) -> MooncakeHa:
        if not self.oplog:
            raise ValueError("@oplog: HA without oplog loses every key on failover (measured); set oplog: true")
        return self


class MooncakeStore(_Strict):
    """Optional Mooncake store as SGLang HiCache L3."""

    enabled: bool = False
    global_segment_size: str = Field(default="16gb", pattern=r"^[0-9]+(kb|mb|gb|tb)?$")
    hicache_ratio: float = Field(default=2.0, gt=0)


MooncakePoc.model_rebuild()
MooncakeHa.model_rebuild()


class Gateway(_Strict):
    replicas: int = Field(default=2, ge=1)
    port: int = 30000
    metrics_port: int = 29000
    prefill_policy: Literal[
        "cache_aware", "power_of_two", "round_robin", "random", "least_load", "bucket", "consistent_hashing", "prefix_hash"
    ] = "cache_aware"
    decode_policy: Literal["cache_aware", "power_of_two", "round_robin", "random", "least_load", "consistent_hashing", "prefix_hash"] = (
        "power_of_two"
    )
    health_check_interval_secs: int = Field(default=10, ge=1)
    health_failure_threshold: int = Field(default=3, ge=1)
    health_success_threshold: int = Field(default=2, ge=1)
    cb_failure_threshold: int = Field(default=10, ge=1)
    cb_timeout_duration_secs: int = Field(default=60, ge=1)
    retry_max_retries: int = Field(default=5, ge=1)
    request_timeout_secs: int = Field(default=1800, ge=1)
    drain_settle_secs: int = Field(default=600, ge=1, description="set on a worker before DELETE; above the longest request")
    api_key_secret: str = Field(default="smg-control-plane", description="Secret holding the control-plane admin key")
    cpu: Quantity = "8"
    memory: Quantity = "16Gi"

    @model_validator(mode="after")
    def _drain(self) -> Gateway:
        if self.drain_settle_secs > self.request_timeout_secs:
            raise ValueError("@drain_settle_secs: longer than request_timeout_secs; no request can outlive the timeout")
        return self


class RdmaResource(_Strict):
    name: str = Field(pattern=r"^[a-z0-9_]+$", description="resource rdma/<name>")
    vendors: tuple[str, ...] = ("15b3",)
    drivers: tuple[str, ...] = ("mlx5_core",)
    if_names: tuple[str, ...] = Field(default=(), description="one NIC/fabric per resource: never all HCAs in one pool")
    hca_max: int = Field(default=64, ge=1)
    per_pod: int = Field(default=1, ge=1)


class Rdma(_Strict):
    provider: Literal["shared_device_plugin", "network_operator"] = "shared_device_plugin"
    gpudirect: bool = True
    mtu: int = Field(default=4096, description="declared end-to-end MTU; preflight checks it")
    gid_index: int | None = Field(default=3, description="RoCE v2 GID index; null on InfiniBand")
    resources: tuple[RdmaResource, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Rdma:
        names = [r.name for r in self.resources]
        if len(names) != len(set(names)):
            raise ValueError("@resources: resource names must be unique")
        return self


class ObjectStore(_Strict):
    endpoint: str = Field(pattern=r"^https?://")
    bucket: str
    prefix: str = ""
    credentials_secret: str = "model-store-credentials"


class ModelCache(_Strict):
    pvc_name: str = "models"
    mount_path: str = "/models"
    object_store: ObjectStore | None = None
    alluxio_replicas: int = Field(default=3, ge=1)
    alluxio_medium: Literal["MEM", "SSD", "HDD"] = "SSD"
    alluxio_path: str = "/mnt/nvme/alluxio"
    alluxio_quota: Quantity = "2Ti"
    node_cache_dir: str = "/var/lib/inferplane/models"


class Thresholds(_Strict):
    ttft_p99_seconds: float = Field(default=2.0, gt=0)
    tpot_p99_seconds: float = Field(default=0.1, gt=0)
    prefill_queue_high: int = Field(default=64, ge=1)
    decode_queue_high: int = Field(default=32, ge=1)
    kv_usage_high: float = Field(default=0.92, gt=0, le=1)
    kv_transfer_failures_per_minute: float = Field(default=1.0, ge=0)
    kv_transfer_speed_low_gb_s: float = Field(
        default=5.0, gt=0, description="median KV transfer speed below this on an RDMA stack suggests a TCP fallback"
    )
    for_duration: str = Field(default="5m", pattern=r"^[0-9]+[smh]$")


class Observability(_Strict):
    release_label: str = Field(default="kps", description="kube-prometheus-stack release label selecting our monitors")
    thresholds: Thresholds = Thresholds()
    scrape_interval: str = "15s"


class GpuOperator(_Strict):
    driver_managed: bool = Field(default=False, description="true: the operator installs the driver the manifest names")
    mig_strategy: Literal["none", "single", "mixed"] = "none"


class Volcano(_Strict):
    queue: str = "inference"
    queue_gpus: int = Field(default=0, ge=0, description="queue capability in GPUs; 0 = all pools' GPUs")
    reclaimable: bool = False


class Cluster(_Strict):
    context: str | None = Field(default=None, description="kubeconfig context; required for a real cluster")
    kubeconfig: str | None = None
    kubernetes_version: str = Field(default="1.33", pattern=r"^1\.[0-9]+$")


class Topology(_Strict):
    """Node labels derived from preflight reports (rack, NUMA/NIC map); applied by Pulumi and by preflight."""

    node_labels: dict[str, dict[str, str]] = {}


class PlatformSpec(_Strict):
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    environment: Literal["local", "poc", "staging", "prod"]
    cluster: Cluster = Cluster()
    pools: Pools
    mooncake: Annotated[MooncakePoc | MooncakeHa, Field(discriminator="mode")]
    gateway: Gateway = Gateway()
    rdma: Rdma = Rdma()
    model_cache: ModelCache = ModelCache()
    observability: Observability = Observability()
    gpu_operator: GpuOperator = GpuOperator()
    volcano: Volcano = Volcano()
    topology: Topology = Topology()

    @model_validator(mode="after")
    def _cross(self) -> PlatformSpec:
        problems: list[str] = []
        pools = self.pools.items()
        models = {p.model for _, p in pools}
        if len(models) > 1:
            detail = ", ".join(f"{n}={p.model}" for n, p in pools)
            problems.append(
                f"pools: pools use different models ({detail}); one P/D set serves one model (deploy another stack for another model)"
            )
        if self.pools.prefill.groups > 0 and self.pools.decode.groups == 0:
            problems.append("pools.decode.groups: 0 decode groups with prefill groups > 0; every prefilled request needs a decode group")
        if self.pools.encoder is not None and self.pools.encoder.groups > 0 and self.pools.prefill.groups == 0:
            problems.append("pools.prefill.groups: encoders need a language-only prefill pool")
        mc = self.mooncake
        if mc.metadata_server:
            port = urlparse(mc.metadata_server).port
            if port == mc.rpc_port:
                problems.append(
                    f"mooncake.metadata_server: port {port} is the master's RPC port; the metadata server is HTTP on "
                    f"{mc.metadata_port} (e.g. http://mooncake-master:{mc.metadata_port}/metadata)"
                )
        rdma_names = {r.name for r in self.rdma.resources}
        for name, pool in pools:
            if pool.rdma_resource and pool.rdma_resource not in rdma_names:
                problems.append(
                    f"pools.{name}.rdma_resource: '{pool.rdma_resource}' is not in rdma.resources ({', '.join(sorted(rdma_names)) or 'none'})"
                )
        if problems:
            raise ValueError(join_problems(problems))
        return self

    @property
    def model_name(self) -> str:
        return self.pools.prefill.model

    def check_against(self, release: ReleaseManifest) -> list[str]:
        """Problems between this stack and the release it deploys."""
        problems = []
        for name, pool in self.pools.items():
            if pool.model not in release.models:
                problems.append(
                    f"pools.{name}.model: '{pool.model}' is not in release {release.release} (models: {', '.join(sorted(release.models))})"
                )
            if name not in release.roles and pool.groups > 0:
                problems.append(f"pools.{name}: release {release.release} pins no '{name}' role; add roles.{name} to the release")
        return problems


class StackConfig(_Strict):
    """The parts of stacks/Pulumi.<stack>.yaml inferplane reads."""

    name: str
    release_path: Path
    platform: PlatformSpec


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or STACKS_DIR) / f"Pulumi.{stack}.yaml"


def parse_platform(data: Any, source: str = "<spec>") -> PlatformSpec:
    if not isinstance(data, dict):
        raise ConfigError(source, [f"{PROJECT}:platform: expected a mapping (got {type(data).__name__})"])
    try:
        return PlatformSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, format_validation_error(exc, prefix=f"{PROJECT}:platform")) from None


def load_stack(stack: str, stacks_dir: Path | None = None) -> StackConfig:
    path = stack_file(stack, stacks_dir)
    if not path.is_file():
        known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise ConfigError(str(path), [f"(file): no such stack '{stack}'; known stacks: {', '.join(known) or 'none'}"])
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(document): not valid YAML ({exc}); fix the syntax"]) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(str(path), ["config: missing; a stack file holds `config:` with inferplane:release and inferplane:platform"])
    release = config.get(f"{PROJECT}:release")
    if not isinstance(release, str) or not release:
        raise ConfigError(str(path), [f"config.{PROJECT}:release: required; the release manifest path, e.g. releases/2026.11.0.yaml"])
    platform = parse_platform(config.get(f"{PROJECT}:platform"), str(path))
    release_path = Path(release)
    if not release_path.is_absolute():
        release_path = REPO_ROOT / release_path
    return StackConfig(name=stack, release_path=release_path, platform=platform)


def load_stack_and_release(stack: str, stacks_dir: Path | None = None) -> tuple[StackConfig, ReleaseManifest]:
    cfg = load_stack(stack, stacks_dir)
    release = load_release(cfg.release_path)
    problems = cfg.platform.check_against(release)
    if problems:
        raise ConfigError(str(stack_file(stack, stacks_dir)), problems)
    return cfg, release
