"""`inferplane validate DIR [--crds DIR] [--kubernetes-version X.Y]`"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, help="an `inferplane render` output directory")
    parser.add_argument(
        "--crds",
        type=Path,
        default=None,
        help="directory of upstream CRD YAML for custom resources (default: ../shared/schemas/crds next to the repository)",
    )
    parser.add_argument("--kubernetes-version", default=None, help="target version, e.g. 1.33 (default: the stack's, from render.json)")


def run(args: argparse.Namespace) -> int:
    from inferplane.errors import ConfigError
    from inferplane.validate import validate_dir

    if not args.directory.is_dir():
        raise ConfigError(str(args.directory), ["DIR: not a directory; render one first with `inferplane render --stack NAME --out DIR`"])
    if args.crds is not None and not args.crds.is_dir():
        raise ConfigError(str(args.crds), ["--crds: not a directory; point it at a folder of CRD YAML files"])
    try:
        report = validate_dir(args.directory, args.crds, args.kubernetes_version)
    except ValueError as exc:
        raise ConfigError(str(args.directory), [f"--kubernetes-version: {exc}"]) from None
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in report.problems:
        print(problem)
    summary = (
        f"{args.directory}: {report.objects} objects in {report.files} files, Kubernetes {report.kubernetes_version}, "
        f"{report.crds_checked} custom resources against their CRDs"
    )
    if report.problems:
        print(f"{summary}: {len(report.problems)} problem(s)", file=sys.stderr)
        return 2
    print(f"{summary}: ok")
    return 0
