"""`inferplane render --stack NAME --out DIR`"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument("--out", required=True, type=Path, help="output directory (created; an earlier render there is replaced)")


def run(args: argparse.Namespace) -> int:
    from inferplane.render import render_stack

    written = render_stack(args.stack, args.out)
    print(f"rendered stack {args.stack} into {args.out}: {', '.join(p.name for p in written)}")
    return 0
