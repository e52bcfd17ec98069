"""`inferplane manifest check PATH...`"""

from __future__ import annotations

import argparse
import sys

from inferplane.errors import ConfigError
from inferplane.manifest import load_release


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="release manifest files (releases/*.yaml)")


def run(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.paths:
        try:
            release = load_release(path)
        except ConfigError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        roles = ", ".join(f"{r}={release.roles[r].model}" for r in release.roles)
        print(f"{path}: ok (release {release.release}, sglang {release.runtime.sglang_version}, roles {roles})")
    return 2 if failed else 0
