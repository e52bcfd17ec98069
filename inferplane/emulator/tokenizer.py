"""A deterministic word-piece tokenizer and chat template.

What the platform needs from a tokenizer is that the same text always gives the same ids, that the
count grows with the text (it drives TTFT, KV size and the gateway's cache-aware routing), and that
ids decode back to readable text. Pieces are a word or one punctuation mark with the whitespace
before it; a piece's id is a hash, and every id decodes to a pronounceable synthetic word.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

VOCAB_SIZE = 151_936
"""Qwen3's vocabulary size: ids in responses look like a real model's."""
FIRST_WORD_ID = 16
"""Ids below this are special tokens; generated text never contains them."""

_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]")
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def encode(text: str) -> list[int]:
    return [piece_id(p) for p in _PIECE.findall(text)]


def piece_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
    return FIRST_WORD_ID + int.from_bytes(digest, "little") % (VOCAB_SIZE - FIRST_WORD_ID)


def word(token_id: int) -> str:
    """The text of one generated token: a space and one to three syllables."""
    n = int(token_id)
    syllables = []
    for _ in range(1 + n % 3):
        n //= 3
        syllables.append(_CONSONANTS[n % len(_CONSONANTS)] + _VOWELS[(n // len(_CONSONANTS)) % len(_VOWELS)])
        n //= len(_CONSONANTS) * len(_VOWELS)
    return " " + "".join(syllables)


def decode(ids: Iterable[int]) -> str:
    return "".join(word(i) for i in ids)


def image_placeholder_ids(image: str, tokens: int) -> list[int]:
    """The ids an image occupies in the prompt: derived from its bytes (here: its URL or data)."""
    seed = hashlib.blake2b(image.encode(), digest_size=16).digest()
    stream = hashlib.shake_256(seed).digest(4 * tokens)
    return [FIRST_WORD_ID + int.from_bytes(stream[4 * i : 4 * i + 4], "little") % (VOCAB_SIZE - FIRST_WORD_ID) for i in range(tokens)]


def chat_prompt(messages: Sequence[dict[str, Any]]) -> tuple[str, list[str]]:
    """ChatML text of the conversation plus the assistant header, and the images it carries.

    Content is a string or a list of OpenAI parts (``text``, ``image_url``); images become
    placeholders whose ids the caller adds, as a VLM processor expands ``<|image_pad|>``.
    """
    text: list[str] = []
    images: list[str] = []
    for message in messages:
        content = message.get("content")
        parts: list[str] = []
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                elif part.get("type") == "image_url":
                    url = part.get("image_url")
                    images.append(str(url.get("url", "") if isinstance(url, dict) else url))
                    parts.append("<|vision_start|><|image_pad|><|vision_end|>")
        text.append(f"<|im_start|>{message.get('role', 'user')}\n{''.join(parts)}<|im_end|>\n")
    text.append("<|im_start|>assistant\n")
    return "".join(text), images
