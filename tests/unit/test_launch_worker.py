"""launch-worker: per-role flags, environment checks, and (marker `conformance`) SGLang's own parser."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import cache
from typing import Any

import pytest

from inferplane import endpoints
from inferplane.errors import ConfigError
from inferplane.launch_worker import WorkerConfig, argv_for, parse_config, pod_env, sample_env, worker_argv, worker_config
from inferplane.manifest import ReleaseManifest
from inferplane.spec import PlatformSpec, load_stack_and_release


@cache
def stack(name: str) -> tuple[PlatformSpec, ReleaseManifest]:
    cfg, release = load_stack_and_release(name)
    return cfg.platform, release


def argv(name: str, role: str, node_rank: int = 0, group: int = 0) -> list[str]:
    spec, release = stack(name)
    cfg = worker_config(role, spec, release)
    return argv_for(cfg, sample_env(cfg, node_rank=node_rank, group=group, namespace=spec.namespace))


def flag(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def test_poc_prefill_is_language_only_pd_prefill_with_every_encoder() -> None:
    spec, _ = stack("poc")
    args = argv("poc", "prefill")
    assert args[:2] == ["sglang", "serve"]
    assert flag(args, "--disaggregation-mode") == "prefill"
    assert flag(args, "--disaggregation-bootstrap-port") == str(spec.pools.prefill.bootstrap_port)
    assert flag(args, "--disaggregation-transfer-backend") == "mooncake"
    assert flag(args, "--disaggregation-ib-device") == "mlx5_0"
    assert flag(args, "--chunked-prefill-size") == "8192"
    assert "--language-only" in args
    urls = args[args.index("--encoder-urls") + 1 : args.index("--encoder-urls") + 1 + spec.pools.encoder.groups]  # type: ignore[union-attr]
    assert (
        urls
        == endpoints.encoder_urls(spec)
        == ["http://encoder-0.encoder.inference-poc:30002", "http://encoder-1.encoder.inference-poc:30002"]
    )
    # poc enables the Mooncake store: HiCache with Mooncake as L3, on prefill only.
    assert flag(args, "--hicache-storage-backend") == "mooncake"
    assert "--enable-hierarchical-cache" in args
    assert "--enable-metrics" in args


def test_poc_decode_and_encoder_flags() -> None:
    decode = argv("poc", "decode")
    assert flag(decode, "--disaggregation-mode") == "decode"
    assert flag(decode, "--max-running-requests") == "256"
    assert "--disaggregation-bootstrap-port" not in decode
    assert "--enable-hierarchical-cache" not in decode
    encoder = argv("poc", "encoder")
    assert "--encoder-only" in encoder
    assert "--disaggregation-mode" not in encoder and "--language-only" not in encoder
    assert flag(encoder, "--port") == "30002"


def test_prod_moe_groups_span_nodes_with_deepep_per_role() -> None:
    prefill = argv("prod", "prefill", node_rank=1, group=23)
    assert flag(prefill, "--deepep-mode") == "normal"
    assert flag(prefill, "--attn-dp-size") == "16" and "--dp-size" not in prefill
    assert (flag(prefill, "--nnodes"), flag(prefill, "--node-rank")) == ("2", "1")
    assert flag(prefill, "--dist-init-addr") == f"prefill-23.prefill.inference:{endpoints.DIST_INIT_PORT}"
    decode = argv("prod", "decode", node_rank=3)
    assert flag(decode, "--deepep-mode") == "low_latency"
    assert flag(decode, "--max-running-requests") == "4096"
    assert flag(decode, "--ep-size") == "32"


def test_hisparse_only_when_the_pool_opts_in() -> None:
    spec, release = stack("prod")
    assert "--enable-hisparse" not in argv("prod", "decode")
    opted = spec.model_copy(
        update={"pools": spec.pools.model_copy(update={"decode": spec.pools.decode.model_copy(update={"enable_hisparse": True})})}
    )
    cfg = worker_config("decode", opted, release)
    assert "--enable-hisparse" in argv_for(cfg, sample_env(cfg))


def test_dp_attention_uses_the_old_flags_before_sglang_0_5_23() -> None:
    spec, release = stack("prod")
    cfg = worker_config("prefill", spec, release).model_copy(update={"sglang_version": "0.5.8"})
    args = argv_for(cfg, sample_env(cfg))
    assert flag(args, "--dp-size") == "16" and "--enable-dp-attention" in args and "--attn-dp-size" not in args


def test_worker_config_survives_the_pod_env_round_trip() -> None:
    spec, release = stack("poc")
    cfg = worker_config("prefill", spec, release)
    assert parse_config(cfg.to_env()) == cfg
    assert pod_env(cfg)["NODE_RANK"] == "$(LWS_WORKER_INDEX)"
    assert sample_env(cfg, node_rank=0, group=1, namespace="ns")["DIST_INIT_ADDR"] == f"prefill-1.prefill.ns:{endpoints.DIST_INIT_PORT}"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"ROLE": "decode"}, "ROLE: 'decode' but this pod's worker config is for 'prefill'"),
        ({"MODEL_PATH": "models/x"}, "MODEL_PATH: 'models/x' is not an absolute path"),
        ({"NNODES": "3"}, "NNODES: 3 but the prefill pool has nodes_per_group=2"),
        ({"NODE_RANK": "2"}, "NODE_RANK: 2 is outside 0..1"),
        ({"NODE_RANK": "-1"}, "NODE_RANK: '-1' is not a non-negative integer"),
        ({"DIST_INIT_ADDR": "prefill-0"}, "DIST_INIT_ADDR: 'prefill-0' is not host:port"),
        ({"RDMA_DEVICE": "mlx5_0;rm -rf"}, "RDMA_DEVICE: 'mlx5_0;rm -rf' is not a comma-separated list"),
    ],
)
def test_bad_environment_names_the_variable_and_the_fix(override: dict[str, str], expected: str) -> None:
    spec, release = stack("prod")
    cfg = worker_config("prefill", spec, release)
    with pytest.raises(ConfigError) as err:
        argv_for(cfg, {**sample_env(cfg), **override})
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith(expected)


def test_a_kv_dtype_sglang_does_not_accept_is_refused_at_build_time() -> None:
    spec, release = stack("poc")
    model = release.models["qwen3-vl-8b"]
    bad = release.model_copy(
        update={
            "models": {"qwen3-vl-8b": model.model_copy(update={"kv_layout": model.kv_layout.model_copy(update={"kv_cache_dtype": "fp16"})})}
        }
    )
    with pytest.raises(ConfigError, match=r"kv_layout.kv_cache_dtype: 'fp16' is not a --kv-cache-dtype"):
        worker_config("decode", spec, bad)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplane.cli", "launch-worker", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_dry_run_prints_the_argv_as_json_from_the_pod_environment() -> None:
    spec, release = stack("poc")
    cfg = worker_config("decode", spec, release)
    env = {"PATH": "/usr/bin:/bin", **sample_env(cfg, namespace=spec.namespace), "INFERPLANE_WORKER_CONFIG": cfg.to_env()}
    done = _cli("--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == worker_argv("decode", spec, release, env)


def test_bad_pod_environment_exits_2_without_a_traceback() -> None:
    spec, release = stack("poc")
    cfg = worker_config("decode", spec, release)
    env = {"PATH": "/usr/bin:/bin", **sample_env(cfg), "ROLE": "prefill", "INFERPLANE_WORKER_CONFIG": cfg.to_env()}
    done = _cli("--dry-run", env=env)
    assert done.returncode == 2
    assert "ROLE: 'prefill' but this pod's worker config is for 'decode'" in done.stderr
    assert "Traceback" not in done.stderr
    missing = _cli("--dry-run", env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 2 and "INFERPLANE_WORKER_CONFIG: not set" in missing.stderr


# --- conformance: SGLang 0.5.23's own parser -------------------------------------------------------------


def _every_argv() -> list[tuple[str, list[str]]]:
    out = []
    for name in ("poc", "prod"):
        spec, _ = stack(name)
        for role, pool in spec.pools.items():
            ranks = sorted({0, pool.nodes_per_group - 1})
            groups = sorted({0, max(pool.groups - 1, 0)})
            for group in groups:
                for rank in ranks:
                    out.append((f"{name}/{role}/group{group}/rank{rank}", argv(name, role, node_rank=rank, group=group)))
    return out


@cache
def _sglang() -> Any:
    try:
        from sglang.srt import server_args
    except Exception as exc:  # torch/triton missing raise various errors on import
        pytest.skip(f"SGLang's parser is not importable ({type(exc).__name__}: {exc}); run `make conformance-deps`")
    return server_args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    _sglang().ServerArgs.add_cli_args(parser)
    return parser


@pytest.mark.conformance
@pytest.mark.parametrize(("case", "args"), _every_argv(), ids=[c for c, _ in _every_argv()])
def test_every_stack_argv_parses_with_sglangs_parser(case: str, args: list[str]) -> None:
    parser = _parser()
    assert args[:2] == ["sglang", "serve"]
    server_args = args[2:]
    parsed = parser.parse_args(server_args)
    # Full flag names only: argparse accepts unique prefixes, which a future flag can make ambiguous.
    for token in server_args:
        if token.startswith("--"):
            action = parser._option_string_actions.get(token)
            assert action is not None, f"{case}: {token} is a prefix, not a flag name"
            assert not type(action).__name__.startswith("Deprecated"), f"{case}: {token} is deprecated in SGLang 0.5.23"
    resolved = _sglang().prepare_server_args(server_args)
    role = case.split("/")[1]
    assert resolved.disaggregation_mode == ("null" if role == "encoder" else role)
    assert resolved.encoder_only is (role == "encoder")
    assert parsed.tp_size == resolved.tp_size


@pytest.mark.conformance
def test_sglangs_parser_rejects_what_it_should() -> None:
    # The parser the conformance test relies on does fail on a bad choice or an unknown flag.
    parser = _parser()
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--model-path", "/m", "--disaggregation-mode", "encode"])
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        parser.parse_args(["--model-path", "/m", "--disaggregation-bootstrap-prot", "1"])


def test_config_schema_is_strict() -> None:
    with pytest.raises(ConfigError, match="INFERPLANE_WORKER_CONFIG"):
        parse_config(json.dumps({"role": "prefill", "typo": 1}))
    assert WorkerConfig.model_fields["schema_version"].default == 1
