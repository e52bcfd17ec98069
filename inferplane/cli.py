"""`inferplane` command line: one entry point, subcommands loaded lazily.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; the table below is the only place that lists them. Bad input ends in
one line per problem and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from inferplane.errors import ConfigError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# (command path, module, one-line help). Nested commands are space-separated.
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("manifest check", "inferplane.commands.manifest_check", "validate release manifests (one line per problem, exit 2)"),
    ("manifest hash-model", "inferplane.commands.hash_model", "sha256 of config, tokenizer and the weights manifest of a model dir"),
    ("spec check", "inferplane.commands.spec_check", "validate a stack's PlatformSpec against its release manifest"),
    ("render", "inferplane.commands.render", "write every Kubernetes object of a stack as YAML (no Pulumi engine)"),
    ("validate", "inferplane.commands.validate", "validate rendered YAML offline: OpenAPI, CRDs, LWS webhook rules, policy"),
    ("launch-worker", "inferplane.commands.launch_worker", "exec `sglang serve` with the role's flags (runs in the pods)"),
    ("emulator", "inferplane.commands.emulator", "run an SGLang engine emulator (unified|prefill|decode|encoder)"),
    ("local", "inferplane.commands.local", "the local platform: up|down|status|group"),
    ("load", "inferplane.commands.load", "generate load and report TTFT/TPOT/E2E percentiles"),
    ("warmup", "inferplane.commands.warmup", "copy and verify model weights into a node-local cache in one pass"),
    ("plan pd", "inferplane.commands.plan_pd", "P:D capacity plan from a workload and measured per-group capacity"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferplane", description="SGLang PD/EPD inference platform: provision, operate, rehearse.")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for path, module, help_text in SUBCOMMANDS:
        words = path.split()
        parent = subs
        for i, word in enumerate(words[:-1]):
            key = " ".join(words[: i + 1])
            if key not in groups:
                group = parent.add_parser(word, help=f"{word} commands")
                groups[key] = group.add_subparsers(dest=f"{key.replace(' ', '_')}_command", metavar="COMMAND")
                group.set_defaults(_group=group)
            parent = groups[key]
        sub = parent.add_parser(words[-1], help=help_text, description=help_text)
        sub.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("inferplane.commands"):
                sub.set_defaults(_missing=True)
                continue
            raise
        mod.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_module", None) is None:
        (getattr(args, "_group", None) or parser).print_help()
        return EXIT_USAGE
    if getattr(args, "_missing", False):
        print(f"inferplane: '{args._module}' is not part of this build", file=sys.stderr)
        return EXIT_USAGE
    mod = importlib.import_module(args._module)
    try:
        return int(mod.run(args) or 0)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("inferplane: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
