"""Which metric names a PromQL expression reads: enough of a parser to check our own queries.

It handles what our rules and dashboards use: selectors with label matchers (including
``{__name__=~"a|b"}``), range and subquery brackets, aggregation clauses (``by``/``without``),
vector matching (``on``/``ignoring``/``group_left``/``group_right``), functions, string arguments
and set operators. It is not a general PromQL parser; promtool checks syntax.
"""

from __future__ import annotations

import re

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}
)
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_BRACES = re.compile(r"\{([^{}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_PLAIN_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


class PromQLNameError(ValueError):
    pass


def _names_in_matchers(body: str, expr: str) -> set[str]:
    names: set[str] = set()
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            if body[pos:].strip():
                raise PromQLNameError(f"cannot read label matchers {{{body}}} in {expr!r}")
            break
        label, op, value = m.groups()
        if label == "__name__":
            if op not in ("=", "=~"):
                raise PromQLNameError(f"negative __name__ matcher in {expr!r}: name the metrics instead")
            for alt in value.split("|") if op == "=~" else [value]:
                if not _PLAIN_NAME.match(alt):
                    raise PromQLNameError(f"__name__ pattern {value!r} in {expr!r}: list plain names joined by '|'")
                names.add(alt)
        pos = m.end()
    return names


def metric_names(expr: str) -> set[str]:
    """Every series name ``expr`` selects (histogram series keep their ``_bucket`` suffix)."""
    names: set[str] = set()

    def drop_matchers(m: re.Match[str]) -> str:
        names.update(_names_in_matchers(m.group(1), expr))
        return " "

    text = _CLAUSE.sub(" ", expr)
    text = _BRACES.sub(drop_matchers, text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _STRING.sub(" ", text)
    for m in _IDENT.finditer(text):
        ident, call = m.group(1), m.group(2)
        if call or ident.lower() in _KEYWORDS:
            continue
        names.add(ident)
    return names
