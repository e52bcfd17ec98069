"""One error formatter for every loader: one line per problem, dotted path first, then the fix.

Operators read these at 3 a.m.; a traceback is never the answer to bad input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

# Model validators report several cross-field problems in one ValueError, separated by this
# (a character no YAML scalar a human writes contains), each ``@sub.path: message``.
PROBLEM_SEP = "\x1e"


def join_problems(problems: Iterable[str]) -> str:
    return PROBLEM_SEP.join("@" + p for p in problems)


class ConfigError(Exception):
    """Bad input. ``problems`` are ready-to-print lines ``path: message``."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.source}: {len(self.problems)} problem(s)"
        return "\n".join([head, *(f"  {p}" for p in self.problems)])


def _dotted(loc: Iterable[Any]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            text = str(item)
            if not text or not all(c.isalnum() or c in "_-:" for c in text):
                text = repr(text)
            parts.append(("." if parts else "") + text)
    return "".join(parts) or "(document)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(exc: ValidationError, prefix: str = "") -> list[str]:
    """Turn pydantic's errors into ``dotted.path: message`` lines.

    Our own validators raise ``ValueError("path: message")`` when the problem belongs to a
    nested field; pydantic reports those at the model's location, so the path in the message
    is appended to the location instead of repeating the model path.
    """
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        _one_error(err, prefix, lines)
    # One line per problem, whatever characters the input carried.
    return [line.replace("\n", "\\n").replace("\r", "\\r") for line in lines]


def _one_error(err: Any, prefix: str, lines: list[str]) -> None:
    # Tagged unions add the tag as a path element; it is noise for a reader.
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    path = _dotted(([prefix] if prefix else []) + loc)
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "value_error" and msg.startswith("@"):
        # Cross-field problems from a model validator carry their own sub-path, one per line.
        for sub in msg.split(PROBLEM_SEP):
            sub_path, _, sub_msg = sub.lstrip("@").partition(": ")
            base = "" if path == "(document)" else path
            lines.append(f"{'.'.join(p for p in (base, sub_path) if p)}: {sub_msg}")
        return
    if err["type"] == "value_error":
        lines.append(f"{path}: {msg}")
        return
    if err["type"] in ("missing",):
        lines.append(f"{path}: field required; add it (see the example in releases/ or stacks/)")
    elif err["type"] == "extra_forbidden":
        lines.append(f"{path}: unknown field (got {_short(err.get('input'))}); check the spelling")
    else:
        lines.append(f"{path}: {msg} (got {_short(err.get('input'))})")
