"""The emulated model: tokens and KV bytes as pure functions of weights, prompt and sampling.

A real forward pass turns (weights, prompt) into a KV cache and the KV cache (plus sampling) into
tokens. Here the weights are the model revision, the KV cache is a fingerprint of (revision,
prompt ids) expanded to the size the release's KV layout gives, and token ``i`` is a hash of
(revision, fingerprint, the sampling parameters that change a distribution, i). Hence:

- the same prompt on the same revision gives the same tokens, on any engine version (an SGLang
  upgrade with unchanged weights keeps golden outputs) and in PD as in unified mode, because the
  decode continues from the fingerprint it reads out of the transferred KV;
- another revision (or the ``wrong_revision`` fault) gives other tokens, and a prefill on the wrong
  weights poisons its decode's output, as on real hardware;
- ``max_new_tokens`` only truncates: a shorter answer is a prefix of a longer one; without
  ``ignore_eos`` an answer ends with EOS at a length (32-1023 tokens) its seed decides.
"""

from __future__ import annotations

import hashlib
import json
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferplane.emulator import tokenizer
from inferplane.manifest import KvLayout

_DTYPE_BYTES = {"auto": 2, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
KV_MAGIC = b"EMUKV1\x00\x00"
_KV_HEADER = struct.Struct("<8s16sQ")  # magic, fingerprint, prompt tokens
KV_HEADER_BYTES = _KV_HEADER.size
EOS_TOKEN_ID = 151645
"""``<|im_end|>`` in Qwen's vocabulary: where an answer ends on its own."""
MIN_NATURAL_LENGTH, MAX_NATURAL_LENGTH = 32, 1024


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters of one request (SGLang's defaults)."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 1 << 30
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    sampling_seed: int | None = None
    constraint: str | None = None  # json_schema / regex / ebnf / structural_tag, whichever is set
    logit_bias: tuple[tuple[str, float], ...] = field(default_factory=tuple)

    def distribution_key(self) -> str:
        """What changes the token distribution. Greedy decoding ignores top-p/top-k/seed."""
        greedy = self.temperature == 0.0 or self.top_k == 1
        key: dict[str, Any] = {
            "penalties": [self.frequency_penalty, self.presence_penalty, self.repetition_penalty],
            "constraint": self.constraint,
            "logit_bias": list(self.logit_bias),
        }
        if not greedy:
            key |= {"t": self.temperature, "p": self.top_p, "k": self.top_k, "min_p": self.min_p, "seed": self.sampling_seed}
        return json.dumps(key, sort_keys=True)


@dataclass(frozen=True)
class EmulatedModel:
    revision: str
    kv_layout: KvLayout

    def fingerprint(self, prompt_ids: Sequence[int]) -> bytes:
        """What the prefill's forward pass leaves in the KV cache, in 16 bytes."""
        h = hashlib.blake2b(digest_size=16, person=b"emu-prefill")
        h.update(self.revision.encode())
        h.update(array("q", prompt_ids).tobytes())
        return h.digest()

    def token_seed(self, fingerprint: bytes, sampling: Sampling, sample_index: int = 0) -> bytes:
        h = hashlib.blake2b(digest_size=32, person=b"emu-decode")
        h.update(self.revision.encode())
        h.update(fingerprint)
        h.update(sampling.distribution_key().encode())
        h.update(sample_index.to_bytes(4, "little"))
        return h.digest()

    @staticmethod
    def token(seed: bytes, index: int) -> int:
        digest = hashlib.blake2b(index.to_bytes(8, "little"), digest_size=8, key=seed).digest()
        return tokenizer.FIRST_WORD_ID + int.from_bytes(digest, "little") % (tokenizer.VOCAB_SIZE - tokenizer.FIRST_WORD_ID)

    @staticmethod
    def natural_length(seed: bytes) -> int:
        """Where the model would emit EOS: answers end by themselves unless ``ignore_eos`` is set."""
        digest = hashlib.blake2b(b"eos", digest_size=4, key=seed).digest()
        return MIN_NATURAL_LENGTH + int.from_bytes(digest, "little") % (MAX_NATURAL_LENGTH - MIN_NATURAL_LENGTH)

    def output_token(self, seed: bytes, index: int, sampling: Sampling) -> int:
        """Token ``index`` of the answer: EOS at the natural length, else a hash."""
        if not sampling.ignore_eos and index == max(self.natural_length(seed), sampling.min_new_tokens):
            return EOS_TOKEN_ID
        return self.token(seed, index)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer and KV head: what a real engine moves per prompt token."""
        layout = self.kv_layout
        return 2 * layout.num_layers * layout.num_kv_heads * layout.head_dim * _DTYPE_BYTES[layout.kv_cache_dtype]

    def kv_payload(self, fingerprint: bytes, prompt_tokens: int, cap: int) -> bytes:
        """The bytes a prefill puts into the store: header + deterministic filler, capped."""
        size = max(KV_HEADER_BYTES, min(cap, KV_HEADER_BYTES + self.kv_bytes_per_token * prompt_tokens))
        header = _KV_HEADER.pack(KV_MAGIC, fingerprint, prompt_tokens)
        return header + hashlib.shake_256(fingerprint).digest(size - KV_HEADER_BYTES)


def parse_kv_payload(payload: bytes) -> tuple[bytes, int]:
    """(fingerprint, prompt tokens) from KV bytes; ValueError when they are not ours or truncated."""
    if len(payload) < KV_HEADER_BYTES:
        raise ValueError(f"KV payload of {len(payload)} bytes is shorter than its header")
    magic, fingerprint, prompt_tokens = _KV_HEADER.unpack_from(payload)
    if magic != KV_MAGIC:
        raise ValueError("KV payload has an unknown layout marker")
    return fingerprint, prompt_tokens
