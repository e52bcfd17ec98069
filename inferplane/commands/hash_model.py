"""`inferplane manifest hash-model DIR [--update RELEASE --model NAME]`"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from inferplane.errors import ConfigError
from inferplane.manifest import load_release, parse_release
from inferplane.node.weights import hash_model, listing_text

FIELDS = ("config_sha256", "tokenizer_sha256", "weights_manifest_sha256")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="model directory (config.json, tokenizer.json, *.safetensors)")
    parser.add_argument("--update", metavar="RELEASE", help="write the hashes into this release manifest")
    parser.add_argument("--model", metavar="NAME", help="model name in the release (with --update)")
    parser.add_argument("--listing", action="store_true", help="also print the sha256sum listing the manifest hash is taken over")
    parser.add_argument("--json", action="store_true", help="print JSON")


def update_release_text(text: str, model: str, hashes: dict[str, str]) -> str:
    """Rewrite the three hash values of one model in place, keeping comments and layout."""
    lines = text.splitlines(keepends=True)
    in_models = False
    model_indent = None
    current = None
    seen: set[str] = set()
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if re.match(r"^models:\s*$", line):
            in_models = True
            continue
        if in_models and stripped and indent == 0:
            in_models = False
        if not in_models or not stripped or stripped.startswith("#"):
            continue
        if model_indent is None or indent == model_indent:
            m = re.match(r"^(\s*)([A-Za-z0-9._-]+):\s*$", line)
            if m:
                model_indent = len(m.group(1))
                current = m.group(2)
                continue
        if current == model:
            for field in FIELDS:
                m = re.match(rf"^(\s*{field}:\s*)\S+(.*)$", line.rstrip("\n"))
                if m:
                    lines[i] = f"{m.group(1)}{hashes[field]}{m.group(2)}\n"
                    seen.add(field)
    missing = [f for f in FIELDS if f not in seen]
    if missing:
        raise ConfigError(
            "--update", [f"models.{model}: no {', '.join(missing)} line to update; add the model with all three hash fields first"]
        )
    return "".join(lines)


def run(args: argparse.Namespace) -> int:
    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        raise ConfigError(str(model_dir), ["DIR: not a directory; pass the model directory holding config.json and *.safetensors"])
    try:
        result = hash_model(str(model_dir))
    except FileNotFoundError as exc:
        raise ConfigError(str(model_dir), [f"DIR: {exc}"]) from None
    hashes = {f: str(result[f]) for f in FIELDS}
    if args.json:
        print(json.dumps({**hashes, "size_bytes": result["size_bytes"], "files": result["files"]}, indent=2, sort_keys=True))
    else:
        for f in FIELDS:
            print(f"{f}: {hashes[f]}")
        print(f"size_bytes: {result['size_bytes']}")
    if args.listing:
        sys.stdout.write(listing_text(result["files"]))  # type: ignore[arg-type]
    if args.update:
        if not args.model:
            raise ConfigError("--update", ["--model: required with --update; name the model entry to rewrite"])
        path = Path(args.update)
        release = load_release(path)
        if args.model not in release.models:
            raise ConfigError(str(path), [f"models.{args.model}: not in this release ({', '.join(sorted(release.models))})"])
        new_text = update_release_text(path.read_text(), args.model, hashes)
        parse_release(new_text, str(path))  # never write a manifest that would not load
        path.write_text(new_text)
        print(f"updated {path} models.{args.model}")
    return 0
