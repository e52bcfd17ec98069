"""Model hashing, defined exactly as the seed's procedure so an operator can reproduce it.

On a node, with coreutils::

    cd MODEL_DIR
    find . -name '*.safetensors' -exec sha256sum {} \\; | LC_ALL=C sort > /tmp/listing
    sha256sum /tmp/listing          # == weights_manifest_sha256
    sha256sum config.json           # == config_sha256
    sha256sum tokenizer.json        # == tokenizer_sha256

The listing has one line per weight file, ``<64 hex><two spaces>./<relative path>\\n``, sorted
bytewise; ``weights_manifest_sha256`` is the sha256 of that listing, final newline included.
Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

# hashlib releases the GIL for buffers over 2 KiB, so threads hash files on every core.
CHUNK = 8 << 20
WEIGHT_SUFFIX = ".safetensors"


def sha256_file(path: str, chunk: int = CHUNK) -> str:
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()


def weight_files(model_dir: str) -> list[str]:
    """Relative paths (``./a/b.safetensors``) of every weight file, as `find .` names them."""
    found = []
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for name in files:
            if name.endswith(WEIGHT_SUFFIX):
                rel = os.path.relpath(os.path.join(root, name), model_dir)
                found.append("./" + rel.replace(os.sep, "/"))
    return sorted(found)


def listing_line(sha256: str, rel_path: str) -> str:
    if not rel_path.startswith("./"):
        rel_path = "./" + rel_path
    return f"{sha256}  {rel_path}\n"


def listing_text(file_hashes: dict[str, str]) -> str:
    """The sorted `sha256sum` listing for {relative path: sha256}; sorted bytewise like LC_ALL=C sort."""
    lines = [listing_line(h, p) for p, h in file_hashes.items()]
    return "".join(sorted(lines, key=lambda s: s.encode()))


def manifest_sha256(file_hashes: dict[str, str]) -> str:
    return hashlib.sha256(listing_text(file_hashes).encode()).hexdigest()


def hash_model(model_dir: str, workers: int | None = None) -> dict[str, object]:
    """config/tokenizer/weights-manifest hashes of a model directory, files hashed in parallel."""
    rels = weight_files(model_dir)
    if not rels:
        raise FileNotFoundError(f"no *{WEIGHT_SUFFIX} files under {model_dir}")
    for required in ("config.json", "tokenizer.json"):
        if not os.path.isfile(os.path.join(model_dir, required)):
            raise FileNotFoundError(f"{required} missing in {model_dir}")
    targets = ["config.json", "tokenizer.json", *rels]
    with ThreadPoolExecutor(max_workers=workers or min(32, (os.cpu_count() or 1) * 2)) as pool:
        digests = dict(zip(targets, pool.map(lambda r: sha256_file(os.path.join(model_dir, r)), targets), strict=False))
    weights = {r: digests[r] for r in rels}
    return {
        "config_sha256": digests["config.json"],
        "tokenizer_sha256": digests["tokenizer.json"],
        "weights_manifest_sha256": manifest_sha256(weights),
        "files": weights,
        "size_bytes": sum(os.path.getsize(os.path.join(model_dir, r)) for r in rels),
    }
