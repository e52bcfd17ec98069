"""Rewrite a stack's pool group counts in place: a line edit that keeps every comment and the layout.

A YAML round trip would drop the comments that explain the stack, so the edit touches only the
scalar of each ``config -> inferplane:platform -> pools -> <role> -> <field>`` line, as
``inferplane manifest hash-model --update`` does for release manifests. The caller validates the
result with inferplane.spec before anything is written.
"""

from __future__ import annotations

import difflib
import re

from inferplane.errors import ConfigError
from inferplane.spec import PROJECT

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[^\s#-][^#]*?):(?P<sep>\s+|$)(?P<rest>.*)$")
_SCALAR = re.compile(r"^(?P<value>[^\s#]+)(?P<tail>.*)$")


def pool_field_path(role: str, field: str) -> tuple[str, ...]:
    return ("config", f"{PROJECT}:platform", "pools", role, field)


def update_pool_fields(text: str, values: dict[str, dict[str, int]], source: str) -> str:
    """Set ``pools.<role>.<field>`` scalars, e.g. ``{"prefill": {"groups": 30}}``; every named line must exist."""
    targets = {pool_field_path(role, field): value for role, fields in values.items() for field, value in fields.items()}
    seen: set[tuple[str, ...]] = set()
    lines = text.splitlines(keepends=True)
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _KEY.match(line.rstrip("\r\n"))
        if not m:
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), m.group("key"))
        rest = m.group("rest")
        if not rest or rest.startswith("#"):
            stack.append((indent, m.group("key")))
            continue
        if path in targets:
            scalar = _SCALAR.match(rest)
            if scalar is None or not scalar.group("value").isdigit():
                raise ConfigError(source, [f"{'.'.join(path[2:])}: expected a plain integer to update (got {rest!r})"])
            ending = line[len(line.rstrip("\r\n")) :]
            lines[i] = f"{m.group('indent')}{m.group('key')}:{m.group('sep')}{targets[path]}{scalar.group('tail')}{ending}"
            seen.add(path)
    missing = [".".join(p[2:]) for p in targets if p not in seen]
    if missing:
        raise ConfigError(source, [f"{m}: no line to update; add it to the stack file first" for m in missing])
    return "".join(lines)


def has_pool_field(text: str, role: str, field: str) -> bool:
    try:
        update_pool_fields(text, {role: {field: 0}}, "<probe>")
    except ConfigError:
        return False
    return True


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"))
