"""`inferplane spec check --stack NAME`"""

from __future__ import annotations

import argparse

from inferplane.spec import load_stack_and_release


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<stack>.yaml")


def run(args: argparse.Namespace) -> int:
    cfg, release = load_stack_and_release(args.stack)
    spec = cfg.platform
    pools = ", ".join(f"{n} {p.groups}x{p.gpus_per_group} GPUs" for n, p in spec.pools.items())
    gpus = sum(p.groups * p.gpus_per_group for _, p in spec.pools.items())
    print(
        f"stack {args.stack}: ok (release {release.release}, model {spec.model_name}, mooncake {spec.mooncake.mode}, {pools}; {gpus} GPUs)"
    )
    return 0
