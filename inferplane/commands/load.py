"""`inferplane load --rate R --duration S [--through gateway|URL]`: open-loop load with latency percentiles."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, required=True, help="requests per second (arrivals, open loop)")
    parser.add_argument("--duration", type=float, required=True, help="seconds of arrivals")
    parser.add_argument(
        "--through", default="gateway", metavar="gateway|URL", help="the local platform's SMG (default; from state.json) or a base URL"
    )
    parser.add_argument("--state-dir", metavar="DIR", help="local platform state dir (with --through gateway)")
    parser.add_argument("--concurrency", type=int, default=0, help="most requests in flight; 0 = unbounded (default)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true", help="stream responses (needed for TTFT/TPOT)")
    parser.add_argument("--api", choices=("generate", "chat", "completions"), default="generate")
    parser.add_argument("--model", help="model name for the OpenAI APIs")
    parser.add_argument("--arrival", choices=("poisson", "uniform"), default="poisson")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    parser.add_argument("--draining-file", metavar="FILE", help="worker URLs to treat as draining, one per line (re-read while running)")
    parser.add_argument("--watch-workers", action="store_true", help="with --through URL: poll URL/workers (an SMG) for draining workers")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from inferplane.loadgen import LoadSpec, render, run_load_sync

    if args.rate <= 0 or args.duration <= 0:
        print("inferplane load: --rate and --duration must be > 0", file=sys.stderr)
        return 2
    headers: dict[str, str] = {}
    metrics_url: str | None = None
    watch: str | None
    if args.through == "gateway":
        from inferplane.local import LocalError, LocalPlatform, admin_headers, load_config

        try:
            state = LocalPlatform(load_config(state_dir=args.state_dir)).state()
        except LocalError as exc:
            print(f"inferplane load: {exc}", file=sys.stderr)
            return 1
        url = state.endpoints.gateway.url
        headers = admin_headers(state)
        metrics_url = state.endpoints.gateway.metrics_url
        watch = url
    elif args.through.startswith(("http://", "https://")):
        url = args.through.rstrip("/")
        watch = url if args.watch_workers else None
    else:
        print(f"inferplane load: --through {args.through!r}: expected 'gateway' or an http(s):// URL", file=sys.stderr)
        return 2
    spec = LoadSpec(
        url=url,
        rate=args.rate,
        duration=args.duration,
        concurrency=args.concurrency,
        prompt_tokens=args.prompt_tokens,
        max_new_tokens=args.max_new_tokens,
        stream=args.stream,
        api=args.api,
        model=args.model,
        arrival=args.arrival,
        seed=args.seed,
        timeout_s=args.timeout,
        gateway_url=watch,
        gateway_metrics_url=metrics_url,
        gateway_headers=headers,
        draining_file=Path(args.draining_file) if args.draining_file else None,
    )
    report = run_load_sync(spec)
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    return 0 if report.sent and report.failed == 0 else 1
