"""`inferplane emulator --role unified|prefill|decode|encoder --port P --release FILE [...]`

Runs one SGLang engine emulator (inferplane/emulator/). Prints ``ready on http://HOST:PORT`` once
it listens; SIGTERM drains it as SGLang drains (``/health`` 503, in-flight requests finish, exit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

ROLES = ("unified", "prefill", "decode", "encoder")
STARTUP_FAULTS_ENV = "INFERPLANE_EMULATOR_FAULTS"
"""JSON faults (as ``POST /emulator/faults`` takes them) the engine starts with, e.g. '{"unhealthy": true}'."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def one_line_error(message: str) -> NoReturn:
        print(f"inferplane emulator: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = one_line_error  # type: ignore[method-assign]
    parser.add_argument("--role", required=True, choices=ROLES, help="unified (no PD), prefill, decode or encoder (EPD)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="HTTP port (SGLang's --port)")
    parser.add_argument("--bootstrap-port", type=int, help="prefill: KV bootstrap server port (default 8998)")
    parser.add_argument("--release", required=True, metavar="FILE", help="release manifest: model path, revision, hashes, KV layout")
    parser.add_argument("--model", metavar="NAME", help="model in the release (default: the role's pinned model)")
    parser.add_argument("--engine-version", metavar="V", help="SGLang version to report and behave as (default: the release's)")
    parser.add_argument("--max-running-requests", type=int, default=256, help="running batch cap; more requests queue FIFO (default 256)")
    parser.add_argument("--max-total-tokens", type=int, default=500_000, help="KV pool size in tokens (default 500000)")
    parser.add_argument("--context-length", type=int, default=32768, help="model context length (default 32768)")
    kv = parser.add_argument_group("PD KV path (prefill and decode)")
    kv.add_argument("--mooncake-master", metavar="ADDR", help="mooncake_master RPC address host:port, or etcd://h1:2379;h2:2379 for HA")
    kv.add_argument(
        "--mooncake-metadata", default="P2PHANDSHAKE", metavar="URL", help="transfer-engine metadata: P2PHANDSHAKE or http://h:p/metadata"
    )
    kv.add_argument(
        "--mooncake-local-hostname", metavar="HOST", help="address peers reach this store client on (default: --host, or 127.0.0.1)"
    )
    kv.add_argument("--mooncake-segment-mb", type=int, default=128, help="memory this client lends the store (default 128)")
    kv.add_argument("--kv-bytes-cap", type=int, default=256 << 10, help="cap on KV bytes per request (default 262144)")
    kv.add_argument("--bootstrap-timeout-s", type=float, default=300.0, help="SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (default 300)")
    kv.add_argument("--waiting-timeout-s", type=float, default=300.0, help="SGLANG_DISAGGREGATION_WAITING_TIMEOUT (default 300)")
    parser.add_argument(
        "--encoder-urls", nargs="+", default=[], metavar="URL", help="EPD: encoders the language side (unified/prefill) calls"
    )
    lat = parser.add_argument_group("latency model")
    lat.add_argument("--prefill-tokens-per-s", type=float, default=20_000.0, help="prefill speed; TTFT grows with prompt tokens")
    lat.add_argument("--prefill-overhead-ms", type=float, default=2.0, help="fixed cost of a prefill")
    lat.add_argument("--itl-ms", type=float, default=4.0, help="decode step time with one running request")
    lat.add_argument("--itl-per-running-ms", type=float, default=0.05, help="added step time per extra running request")
    lat.add_argument("--encode-ms-per-item", type=float, default=10.0, help="encoder: time per image")
    parser.add_argument("--health-check-timeout-s", type=float, default=20.0, help="SGLANG_HEALTH_CHECK_TIMEOUT (default 20)")
    parser.add_argument(
        "--drain-poll-s", type=float, default=1.0, help="after SIGTERM, how often to check for remaining requests (SGLang: 5)"
    )
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))


def _problems(args: argparse.Namespace) -> list[str]:
    problems: list[str] = []
    for name in ("port", "bootstrap_port"):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= 65535:
            problems.append(f"--{name.replace('_', '-')}: {value} is not a TCP port (1-65535)")
    for name in ("max_running_requests", "max_total_tokens", "context_length", "mooncake_segment_mb", "kv_bytes_cap"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')}: must be at least 1")
    for name in ("bootstrap_timeout_s", "waiting_timeout_s", "health_check_timeout_s", "drain_poll_s", "prefill_tokens_per_s"):
        if getattr(args, name) <= 0:
            problems.append(f"--{name.replace('_', '-')}: must be > 0")
    for name in ("prefill_overhead_ms", "itl_ms", "itl_per_running_ms", "encode_ms_per_item"):
        if getattr(args, name) < 0:
            problems.append(f"--{name.replace('_', '-')}: must be >= 0")
    if args.role in ("prefill", "decode") and not args.mooncake_master:
        problems.append(
            f"--mooncake-master: required with --role {args.role}; KV moves through the Mooncake store (host:port or etcd://...)"
        )
    if args.bootstrap_port is not None and args.role != "prefill":
        problems.append(f"--bootstrap-port: only a prefill serves a bootstrap port (got --role {args.role})")
    if args.bootstrap_port is not None and args.bootstrap_port == args.port:
        problems.append("--bootstrap-port: must differ from --port")
    if args.encoder_urls and args.role not in ("unified", "prefill"):
        problems.append(f"--encoder-urls: only the language side (unified or prefill) calls encoders (got --role {args.role})")
    for url in args.encoder_urls:
        if not url.startswith(("http://", "https://")):
            problems.append(f"--encoder-urls: {url!r} is not an http(s) URL")
    return problems


def run(args: argparse.Namespace) -> int:
    problems = _problems(args)
    if problems:
        for p in problems:
            print(f"inferplane emulator: {p}", file=sys.stderr)
        return 2

    import asyncio
    import errno
    import logging

    from inferplane.emulator.config import DEFAULT_BOOTSTRAP_PORT, EngineConfig, model_from_release
    from inferplane.emulator.latency import LatencyModel
    from inferplane.emulator.server import Emulator
    from inferplane.errors import ConfigError
    from inferplane.manifest import load_release

    release = load_release(args.release)
    try:
        model = model_from_release(release, args.role, args.model)
    except KeyError:
        raise ConfigError(
            args.release, [f"models.{args.model}: not in this release ({', '.join(sorted(release.models))}); pick one with --model"]
        ) from None
    local_hostname = args.mooncake_local_hostname or (args.host if args.host not in ("0.0.0.0", "::", "") else "127.0.0.1")
    cfg = EngineConfig(
        role=args.role,
        host=args.host,
        port=args.port,
        model=model,
        release=release.release,
        engine_version=args.engine_version or release.effective(args.role).sglang_version
        if args.role in release.roles
        else args.engine_version or release.runtime.sglang_version,
        bootstrap_port=(args.bootstrap_port or DEFAULT_BOOTSTRAP_PORT) if args.role == "prefill" else None,
        max_running_requests=args.max_running_requests,
        max_total_num_tokens=args.max_total_tokens,
        context_length=args.context_length,
        latency=LatencyModel(
            prefill_tokens_per_s=args.prefill_tokens_per_s,
            prefill_overhead_ms=args.prefill_overhead_ms,
            itl_ms=args.itl_ms,
            itl_per_running_ms=args.itl_per_running_ms,
            encode_ms_per_item=args.encode_ms_per_item,
        ),
        mooncake_master=args.mooncake_master if args.role in ("prefill", "decode") else None,
        mooncake_metadata=args.mooncake_metadata,
        mooncake_local_hostname=local_hostname,
        mooncake_segment_bytes=args.mooncake_segment_mb << 20,
        kv_bytes_cap=args.kv_bytes_cap,
        encoder_urls=tuple(u.rstrip("/") for u in args.encoder_urls),
        bootstrap_timeout_s=args.bootstrap_timeout_s,
        waiting_timeout_s=args.waiting_timeout_s,
        health_check_timeout_s=args.health_check_timeout_s,
        drain_poll_s=args.drain_poll_s,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)

    def announce(line: str) -> None:
        print(line, flush=True)

    try:
        emulator = Emulator(cfg)
        # A rehearsal can start a broken build (the upgrade runbook's failure drills): faults as
        # POST /emulator/faults takes them, in force before the first request.
        startup_faults = os.environ.get(STARTUP_FAULTS_ENV)
        if startup_faults:
            try:
                problems = emulator.faults.update(json.loads(startup_faults))
            except ValueError as exc:
                problems = [f"not JSON ({exc})"]
            if problems:
                print(f"inferplane emulator: {STARTUP_FAULTS_ENV}: {'; '.join(problems)}", file=sys.stderr)
                return 2
        status = asyncio.run(emulator.serve_forever(announce))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            ports = f"{cfg.port}" + (f" or bootstrap port {cfg.bootstrap_port}" if cfg.bootstrap_port else "")
            print(f"inferplane emulator: {cfg.host}:{ports} is already in use; pick a free --port/--bootstrap-port", file=sys.stderr)
        else:
            print(f"inferplane emulator: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}", file=sys.stderr)
        return 2
    # Drained and closed. Skip interpreter teardown: the Mooncake client's native threads can
    # keep retrying a master that is already gone, and SGLang also ends with a hard exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
