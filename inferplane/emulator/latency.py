"""How long an emulated engine takes: the few terms that shape TTFT, TPOT and queueing.

- Prefill is compute-bound: ``prefill_overhead_ms + uncached_prompt_tokens / prefill_tokens_per_s``,
  so TTFT grows linearly with the prompt (prefix-cache hits are free, as on a real engine).
- Decode is memory-bound: every step emits one token per running request and takes
  ``itl_ms + itl_per_running_ms * (running - 1)``, so inter-token latency grows mildly with the batch.
- Queueing is not a term here: the scheduler (engine.py) admits requests FIFO up to
  ``--max-running-requests`` and the KV pool, and waiting time falls out of that.

Defaults are fast, for tests; the local platform passes realistic values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyModel:
    prefill_tokens_per_s: float = 20_000.0
    prefill_overhead_ms: float = 2.0
    itl_ms: float = 4.0
    itl_per_running_ms: float = 0.05
    encode_ms_per_item: float = 10.0

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0:
            raise ValueError("prefill_tokens_per_s must be > 0")
        for name in ("prefill_overhead_ms", "itl_ms", "itl_per_running_ms", "encode_ms_per_item"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    def prefill_s(self, uncached_tokens: int) -> float:
        """Seconds to prefill a prompt of which ``uncached_tokens`` miss the prefix cache."""
        return self.prefill_overhead_ms / 1000.0 + max(0, uncached_tokens) / self.prefill_tokens_per_s

    def itl_s(self, running: int) -> float:
        """Seconds per decode step with ``running`` requests in the batch."""
        return (self.itl_ms + self.itl_per_running_ms * max(0, running - 1)) / 1000.0

    def encode_s(self, items: int) -> float:
        return self.encode_ms_per_item * max(1, items) / 1000.0
