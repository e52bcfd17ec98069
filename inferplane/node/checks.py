"""The one record every preflight check produces, and how statuses combine.

A check is one line of the report: ``name, status (ok|warn|fail), observed, expected, hint``.
Plain dicts, so an Ansible module can return them as JSON and the controller can read them back
without a schema of its own. A check that could not be evaluated because something it depends on
is missing is not a check line: it goes to ``skipped`` with the reason, so every failing line in
a report names a real problem and a node fails with exactly the checks that found one.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

from typing import TypedDict

OK, WARN, FAIL = "ok", "warn", "fail"
STATUSES = (OK, WARN, FAIL)
_RANK = {OK: 0, WARN: 1, FAIL: 2}


class Check(TypedDict):
    area: str
    name: str
    status: str
    observed: str
    expected: str
    hint: str


class Skip(TypedDict):
    area: str
    name: str
    reason: str


def check(area: str, name: str, status: str, observed: object, expected: object, hint: str = "") -> Check:
    if status not in _RANK:
        raise ValueError(f"check {name}: status {status!r} is not one of {', '.join(STATUSES)}")
    # ok lines carry no hint: a hint is what to do, and there is nothing to do.
    return Check(area=area, name=name, status=status, observed=str(observed), expected=str(expected), hint=hint if status != OK else "")


def skip(area: str, name: str, reason: str) -> Skip:
    return Skip(area=area, name=name, reason=reason)


def worst(statuses: list[str] | tuple[str, ...]) -> str:
    """The most severe status; ``ok`` for an empty list."""
    best = OK
    for status in statuses:
        if _RANK[status] > _RANK[best]:
            best = status
    return best


def node_status(checks: list[Check]) -> str:
    """``pass`` / ``warn`` / ``fail`` for a node, from its check lines."""
    return {OK: "pass", WARN: "warn", FAIL: "fail"}[worst([c["status"] for c in checks])]


def failing(checks: list[Check], status: str = FAIL) -> list[str]:
    return [c["name"] for c in checks if c["status"] == status]


def join_limited(items: list[str], limit: int = 8) -> str:
    """``a, b, c`` with at most ``limit`` items, so one bad node does not produce a page-long line."""
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f", ... ({len(items) - limit} more)"
