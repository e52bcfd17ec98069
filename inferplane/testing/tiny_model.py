"""Deterministic model directories in the real safetensors format, for warm-up, hashing and the
local platform. Same arguments, same bytes, so releases/local.yaml can pin their hashes.

safetensors layout: 8-byte little-endian header length, a JSON header mapping tensor name to
{dtype, shape, data_offsets}, then the raw tensor bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

LOCAL_MODEL_NAME = "emu-tiny"
LOCAL_MODEL_SERVED_NAME = "emu-tiny"


def _bytes(seed: str, n: int) -> bytes:
    """n pseudo-random bytes from a seed (sha256 in counter mode, then tiled for speed)."""
    block = b"".join(hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range(2048))  # 64 KiB
    reps, rem = divmod(n, len(block))
    return block * reps + block[:rem]


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for _, (_, _, data) in tensors.items():
            fh.write(data)
    os.replace(tmp, path)


def make_model(dest: str | os.PathLike[str], shards: int = 2, shard_bytes: int = 1 << 20, seed: str = LOCAL_MODEL_NAME) -> Path:
    """A model dir: config.json, tokenizer.json, tokenizer_config.json and `shards` weight files
    named like Hugging Face's (model-00001-of-0000N.safetensors), each about shard_bytes."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 32000,
        "torch_dtype": "bfloat16",
        "_inferplane_seed": seed,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    vocab = {f"tok{i}": i for i in range(512)}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}, "added_tokens": []}
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, sort_keys=True) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 32768}) + "\n")
    elems = max(1, shard_bytes // 2)  # f16: 2 bytes per element
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        data = _bytes(f"{seed}:{i}", elems * 2)
        write_safetensors(out / name, {f"model.layers.{i - 1}.mlp.weight": ("F16", [elems], data)})
    index = {
        "metadata": {"total_size": shards * elems * 2},
        "weight_map": {f"model.layers.{i - 1}.mlp.weight": f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)},
    }
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return out
