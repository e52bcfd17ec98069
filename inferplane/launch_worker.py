"""The engine pods' command line: ``sglang serve`` with the role's flags.

The pool's pod template carries a :class:`WorkerConfig` (JSON in ``INFERPLANE_WORKER_CONFIG``)
built here from the stack spec and the release; the pod's own facts come from its environment
(LWS fills them in): ROLE, MODEL_PATH, NODE_RANK, NNODES, DIST_INIT_ADDR, RDMA_DEVICE.
`inferplane launch-worker` turns both into the argv (:func:`argv_for`) and execs it. Keeping
the config in the pod template (not in a ConfigMap) means every LWS revision carries the exact
config it was rolled out with, so a group recreated mid-rollout starts as its revision says.

Per-role flags (SGLang 0.5.23, runtime-interfaces.md section 3):
- prefill: ``--disaggregation-mode prefill``, its bootstrap port, DeepEP ``normal``, chunked prefill;
  HiCache with the Mooncake store as L3 when the stack enables the store; with an encoder pool,
  ``--language-only --encoder-urls`` (EPD).
- decode: ``--disaggregation-mode decode``, DeepEP ``low_latency``, ``--max-running-requests``.
- encoder: ``--encoder-only`` (it cannot be combined with a disaggregation mode).
- all: Mooncake transfer backend and IB device (P/D), TP/DP/EP, DP attention, memory fraction,
  KV dtype/page size/quantization from the release (P and D must agree), ``--enable-metrics``,
  HiSparse only when the pool opts in.
tests/unit/test_launch_worker.py parses every argv the poc and prod stacks produce with SGLang's
own parser (marker ``conformance``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplane import endpoints
from inferplane.errors import ConfigError, format_validation_error
from inferplane.manifest import ReleaseManifest
from inferplane.spec import PlatformSpec, Pool

ENV_CONFIG = "INFERPLANE_WORKER_CONFIG"
ENV_KEYS = ("ROLE", "MODEL_PATH", "NODE_RANK", "NNODES", "DIST_INIT_ADDR", "RDMA_DEVICE")
Role = Literal["prefill", "decode", "encoder"]

# --kv-cache-dtype choices of SGLang 0.5.23 that the release's KV layout can name.
_KV_DTYPES = {"auto": "auto", "bf16": "bf16", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")
_IB_DEVICES = re.compile(r"^[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HiCache(_Strict):
    """SGLang hierarchical cache with the Mooncake store as L3 (addresses come from the ConfigMap env)."""

    ratio: float = Field(gt=0)
    storage_backend: Literal["mooncake"] = "mooncake"


class WorkerConfig(_Strict):
    """Everything the wrapper needs besides the pod's own environment."""

    schema_version: Literal[1] = 1
    role: Role
    model_path: str
    served_model_name: str
    sglang_version: str
    pool: Pool
    kv_cache_dtype: str = "auto"
    page_size: int = Field(default=1, ge=1)
    quantization: str = "none"
    encoder_urls: tuple[str, ...] = ()
    hicache: HiCache | None = None

    def to_env(self) -> str:
        return self.model_dump_json(exclude_defaults=False)


def worker_config(role: str, spec: PlatformSpec, release: ReleaseManifest) -> WorkerConfig:
    """The config a pool's pods carry. Raises ConfigError naming the stack field to fix."""
    pools = dict(spec.pools.items())
    if role not in pools:
        raise ConfigError("launch-worker", [f"pools.{role}: this stack has no {role} pool ({', '.join(pools)})"])
    if role not in release.roles:
        raise ConfigError(f"release {release.release}", [f"roles.{role}: not pinned; add roles.{role} to the release"])
    pool = pools[role]
    eff = release.effective(role)
    kv = eff.model.kv_layout
    if kv.kv_cache_dtype not in _KV_DTYPES:
        raise ConfigError(
            f"release {release.release}",
            [
                f"models.{eff.model_name}.kv_layout.kv_cache_dtype: '{kv.kv_cache_dtype}' is not a --kv-cache-dtype of "
                f"SGLang {eff.sglang_version} ({', '.join(_KV_DTYPES)})"
            ],
        )
    store = spec.mooncake.store
    hicache = HiCache(ratio=store.hicache_ratio) if role == "prefill" and store is not None and store.enabled else None
    return WorkerConfig(
        role=role,  # type: ignore[arg-type]
        model_path=eff.model.path,
        served_model_name=eff.model.served_model_name,
        sglang_version=eff.sglang_version,
        pool=pool,
        kv_cache_dtype=_KV_DTYPES[kv.kv_cache_dtype],
        page_size=kv.page_size,
        quantization=eff.model.quantization,
        encoder_urls=tuple(endpoints.encoder_urls(spec)) if role == "prefill" else (),
        hicache=hicache,
    )


def parse_config(text: str | None) -> WorkerConfig:
    if not text:
        raise ConfigError("launch-worker", [f"{ENV_CONFIG}: not set; the pool's pod template sets it (inferplane/builders/pools.py)"])
    try:
        return WorkerConfig.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ConfigError("launch-worker", [f"{ENV_CONFIG}: not JSON ({exc.msg} at {exc.pos})"]) from None
    except ValidationError as exc:
        raise ConfigError("launch-worker", format_validation_error(exc, prefix=ENV_CONFIG)) from None


def _int(env: Mapping[str, str], key: str, default: int, problems: list[str]) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        problems.append(f"{key}: '{raw}' is not a non-negative integer")
        return default
    return int(raw)


def argv_for(cfg: WorkerConfig, env: Mapping[str, str]) -> list[str]:
    """``sglang serve ...`` for this pod. Bad environment: ConfigError, one line per variable."""
    pool = cfg.pool
    problems: list[str] = []
    role = env.get("ROLE", "").strip()
    if role != cfg.role:
        problems.append(f"ROLE: '{role}' but this pod's worker config is for '{cfg.role}'; set ROLE={cfg.role}")
    model_path = env.get("MODEL_PATH", "").strip() or cfg.model_path
    if not model_path.startswith("/"):
        problems.append(f"MODEL_PATH: '{model_path}' is not an absolute path; weights load from the /models volume")
    nnodes = _int(env, "NNODES", 1, problems)
    node_rank = _int(env, "NODE_RANK", 0, problems)
    if nnodes != pool.nodes_per_group:
        problems.append(
            f"NNODES: {nnodes} but the {cfg.role} pool has nodes_per_group={pool.nodes_per_group}; LWS sets it from the group size"
        )
    elif not 0 <= node_rank < nnodes:
        problems.append(f"NODE_RANK: {node_rank} is outside 0..{nnodes - 1}")
    dist_init = env.get("DIST_INIT_ADDR", "").strip()
    if nnodes > 1 and not _HOST_PORT.match(dist_init):
        problems.append(f"DIST_INIT_ADDR: '{dist_init}' is not host:port; a {nnodes}-node group needs the leader's rendezvous address")
    ib_device = env.get("RDMA_DEVICE", "").strip() or (pool.ib_device or "")
    if ib_device and not _IB_DEVICES.match(ib_device):
        problems.append(f"RDMA_DEVICE: '{ib_device}' is not a comma-separated list of device names like mlx5_0,mlx5_1")
    if problems:
        raise ConfigError("launch-worker environment", problems)

    argv = [
        "sglang",
        "serve",
        "--model-path",
        model_path,
        "--served-model-name",
        cfg.served_model_name,
        "--host",
        "0.0.0.0",
        "--port",
        str(pool.port),
        "--tp-size",
        str(pool.tp),
    ]
    if pool.dp_attention and _version(cfg.sglang_version) >= (0, 5, 23):
        # 0.5.23 deprecates `--dp-size N --enable-dp-attention` for `--attn-dp-size N`; passing
        # --dp-size as well would ask for N replicas of an N-wide attention-DP engine.
        argv += ["--attn-dp-size", str(pool.dp)]
    elif pool.dp > 1:
        argv += ["--dp-size", str(pool.dp)]
        if pool.dp_attention:
            argv.append("--enable-dp-attention")
    if pool.ep > 1:
        argv += ["--ep-size", str(pool.ep)]
    if nnodes > 1:
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--dist-init-addr", dist_init]
    if pool.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", str(pool.mem_fraction_static)]
    argv += ["--kv-cache-dtype", cfg.kv_cache_dtype, "--page-size", str(cfg.page_size)]
    if cfg.quantization != "none":
        argv += ["--quantization", cfg.quantization]
    if pool.moe_a2a_backend != "none":
        argv += ["--moe-a2a-backend", pool.moe_a2a_backend]
        if pool.moe_a2a_backend == "deepep":
            argv += ["--deepep-mode", pool.deepep_mode or _DEFAULT_DEEPEP_MODE[cfg.role]]
    argv.append("--enable-metrics")

    if cfg.role == "encoder":
        argv.append("--encoder-only")
    else:
        argv += ["--disaggregation-mode", cfg.role, "--disaggregation-transfer-backend", "mooncake"]
        if ib_device:
            argv += ["--disaggregation-ib-device", ib_device]
    if cfg.role == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(pool.bootstrap_port)]
        if pool.chunked_prefill_size is not None:
            argv += ["--chunked-prefill-size", str(pool.chunked_prefill_size)]
        if cfg.encoder_urls:
            argv += ["--language-only", "--encoder-urls", *cfg.encoder_urls]
        if cfg.hicache is not None:
            argv += [
                "--enable-hierarchical-cache",
                "--hicache-ratio",
                str(cfg.hicache.ratio),
                "--hicache-storage-backend",
                cfg.hicache.storage_backend,
            ]
    if cfg.role == "decode" and pool.max_running_requests is not None:
        argv += ["--max-running-requests", str(pool.max_running_requests)]
    if pool.enable_hisparse:
        argv.append("--enable-hisparse")
    argv += list(pool.extra_args)
    return argv


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.lstrip("v").split("."):
        digits = re.match(r"[0-9]+", piece)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


# Prefill moves long prompts (throughput kernels); decode moves one token per step (latency kernels).
_DEFAULT_DEEPEP_MODE: dict[str, str] = {"prefill": "normal", "decode": "low_latency", "encoder": "auto"}


def worker_argv(role: str, spec: PlatformSpec, release: ReleaseManifest, env: Mapping[str, str]) -> list[str]:
    """The argv a ``role`` pod of this stack runs, given the pod's environment."""
    return argv_for(worker_config(role, spec, release), env)


def pod_env(cfg: WorkerConfig) -> dict[str, str]:
    """The environment an LWS pod hands the wrapper; ``$(VAR)`` references are expanded by the kubelet
    from what LWS injects (LWS_WORKER_INDEX, LWS_GROUP_SIZE, LWS_LEADER_ADDRESS)."""
    env = {
        "ROLE": cfg.role,
        "MODEL_PATH": cfg.model_path,
        "NODE_RANK": "$(LWS_WORKER_INDEX)",
        "NNODES": "$(LWS_GROUP_SIZE)",
        "DIST_INIT_ADDR": f"$(LWS_LEADER_ADDRESS):{endpoints.DIST_INIT_PORT}",
    }
    if cfg.pool.ib_device:
        env["RDMA_DEVICE"] = cfg.pool.ib_device
    return env


def sample_env(cfg: WorkerConfig, node_rank: int = 0, group: int = 0, namespace: str = "inference") -> dict[str, str]:
    """What :func:`pod_env` expands to in group ``group``'s pod ``node_rank`` (for dry runs and tests)."""
    leader = endpoints.leader_host(namespace, cfg.role, group)
    expanded = {
        "$(LWS_WORKER_INDEX)": str(node_rank),
        "$(LWS_GROUP_SIZE)": str(cfg.pool.nodes_per_group),
        "$(LWS_LEADER_ADDRESS)": leader,
    }
    env = {}
    for key, value in pod_env(cfg).items():
        for ref, real in expanded.items():
            value = value.replace(ref, real)
        env[key] = value
    return env
