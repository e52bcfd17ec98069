"""Models for the warm-up tests: real safetensors files, their release hashes, and helpers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inferplane.node.warmup import LISTING_FILE, STATE_FILE, TMP_SUFFIX, Expected
from inferplane.node.weights import hash_model, listing_text
from inferplane.testing.tiny_model import make_model


@dataclass
class Model:
    path: Path
    expected: Expected
    shards: list[str]  # relative paths of the weight files


def model(root: Path, shards: int = 3, shard_bytes: int = 600 * 1024, listing: bool = True, seed: str = "warm") -> Model:
    """A model directory; with ``listing``, the publisher's weights.sha256 next to it."""
    path = make_model(root, shards=shards, shard_bytes=shard_bytes, seed=seed)
    h = hash_model(str(path))
    if listing:
        (path / LISTING_FILE).write_text(listing_text(h["files"]))  # type: ignore[arg-type]
    expected = Expected(str(h["config_sha256"]), str(h["tokenizer_sha256"]), str(h["weights_manifest_sha256"]))
    return Model(path, expected, sorted(p[2:] for p in h["files"]))  # type: ignore[union-attr]


def corrupt(path: Path, offset: int = 4096) -> None:
    """Flip one byte in place, keeping the size: what bit rot or a bad upload looks like."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def final_names(dest: Path) -> set[str]:
    """Every file under its final name (not our state, lock or temp files)."""
    out = set()
    for top, _, names in os.walk(dest):
        for name in names:
            if name.endswith(TMP_SUFFIX) or name.startswith(".inferplane-warmup"):
                continue
            out.add(os.path.relpath(os.path.join(top, name), dest).replace(os.sep, "/"))
    return out


def temp_names(dest: Path) -> set[str]:
    return {n for _, _, names in os.walk(dest) for n in names if n.endswith(TMP_SUFFIX)}


def state_path(dest: Path) -> Path:
    return dest / STATE_FILE
