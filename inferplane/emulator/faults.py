"""Injected faults: what ``POST /emulator/faults`` can make an engine do.

- ``unhealthy``: ``/health``, ``/health_generate`` and ``/ready`` answer 503 (a wedged scheduler).
- ``slow_ms``: every request and health probe waits this long first (a slow GPU, a hot node).
- ``crash``: the process exits at once, as after a CUDA error (exit status 1).
- ``wrong_revision``: the engine serves and reports another model revision (stale weights).
- ``kv_transfer_fail``: every KV transfer this engine takes part in fails.
- ``error_body``: ``/generate`` and the OpenAI routes answer HTTP 200 with an error body.

``POST`` sets the fields it names and keeps the others; ``DELETE`` clears every fault.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class Faults:
    unhealthy: bool = False
    slow_ms: int = 0
    crash: bool = False
    wrong_revision: str | None = None
    kv_transfer_fail: bool = False
    error_body: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def clear(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def update(self, body: Any) -> list[str]:
        """Apply a JSON body; returns the problems (nothing is applied when there are any)."""
        if not isinstance(body, dict):
            return [f"expected a JSON object with any of {', '.join(f.name for f in fields(self))}"]
        known = {f.name for f in fields(self)}
        problems = [f"{key}: unknown fault; known: {', '.join(sorted(known))}" for key in body if key not in known]
        for key, value in body.items():
            if key in ("unhealthy", "crash", "kv_transfer_fail", "error_body") and not isinstance(value, bool):
                problems.append(f"{key}: expected true or false, got {value!r}")
            elif key == "slow_ms" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                problems.append(f"slow_ms: expected a non-negative integer, got {value!r}")
            elif key == "wrong_revision" and value is not None and (not isinstance(value, str) or not value):
                problems.append(f"wrong_revision: expected a non-empty string or null, got {value!r}")
        if not problems:
            for key, value in body.items():
                setattr(self, key, value)
        return problems
