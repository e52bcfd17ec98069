"""Small profiles whose numbers a test can work out by hand."""

from __future__ import annotations

import copy
from typing import Any

from inferplane.planner.profile import Curves, Profile

PROVENANCE = {
    "source": "hand-entered",
    "date": "2026-11-29",
    "hardware": "test",
    "model": "test",
    "engine": "test",
}


def hand_profile(**overrides: Any) -> dict[str, Any]:
    """Constant 10,000 prompt tokens/s; TTFT at 1,000 tokens = load - 0.3 s on loads 0.5..0.9; decode grid below.

    decode TPOT: 10 ms at batch 1; +20 ms (context 1,000) or +40 ms (context 10,000) at batch 100,
    linear in between. KV transfer: 1,000 bytes per token at 1 GB/s, no fixed latency.
    """
    doc: dict[str, Any] = {
        "schema_version": 1,
        "name": "hand",
        "provenance": PROVENANCE,
        "prefill": {
            "group": {"nodes_per_group": 1, "gpus_per_node": 8, "tp": 8},
            "lanes": 1,
            "throughput": {"input_tokens": [1000, 100000], "tokens_per_second": [10000, 10000]},
            "ttft_p99_seconds": {"input_tokens": [1000, 100000], "load": [0.5, 0.9], "seconds": [[0.2, 0.6], [20.0, 60.0]]},
        },
        "decode": {
            "group": {"nodes_per_group": 1, "gpus_per_node": 8, "tp": 8},
            "max_running_requests": 1000,
            "kv_tokens": 1_000_000,
            "tpot_seconds": {"context_tokens": [1000, 10000], "batch": [1, 100], "seconds": [[0.01, 0.03], [0.01, 0.05]]},
        },
        "kv_transfer": {"bytes_per_token": 1000, "gbytes_per_second": 1.0, "latency_seconds": 0.0},
    }
    for dotted, value in overrides.items():
        node = doc
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return copy.deepcopy(doc)


def curves(**overrides: Any) -> Curves:
    return Curves(Profile.model_validate(hand_profile(**overrides)))


def queue_profile(tokens_per_second: float, chunk_tokens: int | None = None, lanes: int = 1) -> Curves:
    """A prefill group that is one plain server: service time = prompt tokens / ``tokens_per_second``."""
    doc = hand_profile()
    doc["prefill"].update(
        lanes=lanes,
        chunk_tokens=chunk_tokens,
        throughput={"input_tokens": [1, 10_000_000], "tokens_per_second": [tokens_per_second, tokens_per_second]},
        ttft_p99_seconds={"input_tokens": [1, 10_000_000], "load": [0.5], "seconds": [[1.0], [1e6]]},
    )
    doc["decode"]["tpot_seconds"]["context_tokens"] = [1000, 20_000_000]
    doc["decode"]["kv_tokens"] = 100_000_000
    return Curves(Profile.model_validate(doc))
