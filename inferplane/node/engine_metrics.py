"""An engine's own view of its work, from SGLang's ``/metrics`` (runtime-interfaces.md section 2).

The gateway forgets a worker's load when it removes it, so whether a group still has work is
read here: running, queued and every PD queue must be 0, and stay 0 for a settle window, before
the group may be recreated. The same counters prove that no new request reached a group after the
gateway marked it draining: requests only complete if they were in flight, so completions beyond
what was in flight are new arrivals.

Stdlib only: Ansible ships it as ``ansible.module_utils.engine_metrics``.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Work the engine holds: scheduler queues and, in PD, the bootstrap/transfer queues (0.5.23 names;
# 0.5.8 called the prefill bootstrap queue ``prealloc``).
IN_FLIGHT: tuple[str, ...] = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_prealloc_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)
# Every request that ends is counted once by one of these (health probes by neither).
FINISHED: tuple[str, ...] = ("sglang:num_requests_total", "sglang:num_aborted_requests_total")
REQUIRED = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


class MetricsError(Exception):
    pass


def _split_series(line: str) -> tuple[str, str, str] | None:
    """(metric name, label text, the rest after the labels) of one sample line; None for comments/blank."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace = line.find("{")
    space = line.find(" ")
    if brace < 0 or (0 <= space < brace):
        name, _, rest = line.partition(" ")
        return name, "", rest
    # Label values may hold '}' or spaces inside quotes: walk to the closing brace.
    i, quoted = brace + 1, False
    while i < len(line):
        c = line[i]
        if c == "\\" and quoted:
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            break
        i += 1
    return line[:brace], line[brace + 1 : i], line[i + 1 :]


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip().lstrip(",").strip()
        j, value = eq + 2, []  # skip '="'
        while j < len(text) and text[j] != '"':
            if text[j] == "\\" and j + 1 < len(text):
                j += 1
            value.append(text[j])
            j += 1
        out[key] = "".join(value)
        i = j + 1
    return out


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value)."""
    out = []
    for line in text.splitlines():
        split = _split_series(line)
        if split is None:
            continue
        name, label_text, rest = split
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out.append((name, _labels(label_text), value))
    return out


def parse(text: str) -> dict[str, float]:
    """Every metric summed over its label sets (DP ranks, TP ranks, streaming or not)."""
    out: dict[str, float] = {}
    for name, _, value in series(text):
        out[name] = out.get(name, 0.0) + value
    return out


def fetch_text(url: str, timeout: float = 5.0) -> str:
    try:
        with _OPENER.open(urllib.request.Request(url), timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except OSError as exc:
        raise MetricsError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def fetch(url: str, timeout: float = 5.0) -> dict[str, float]:
    """Any Prometheus endpoint, parsed (``parse``)."""
    return parse(fetch_text(url, timeout))


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """An SGLang engine's /metrics; refuses an engine started without --enable-metrics."""
    sample = fetch(url, timeout)
    missing = [m for m in REQUIRED if m not in sample]
    if missing:
        raise MetricsError(f"{url}: no {', '.join(missing)}; the engine must run with --enable-metrics")
    return sample


def in_flight(sample: dict[str, float]) -> dict[str, float]:
    return {name.split(":", 1)[1]: sample[name] for name in IN_FLIGHT if name in sample}


def finished(sample: dict[str, float]) -> float:
    return sum(sample.get(name, 0.0) for name in FINISHED)


def new_arrivals(before: dict[str, float], after: dict[str, float]) -> int:
    """Requests that reached the engine between two samples and have finished by the second.

    A lower bound (arrivals still running at ``after`` are not counted) that never counts a request
    that was already in flight at ``before``; exact once the engine is idle at ``after``.
    """
    done = finished(after) - finished(before)
    return max(0, round(done - sum(in_flight(before).values())))


@dataclass
class DrainResult:
    idle: bool
    waited_s: float
    settle_s: float
    timeout_s: float
    polls: int
    last: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    new_requests: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def drain(
    url: str,
    settle_s: float,
    timeout_s: float,
    poll_s: float = 0.5,
    baseline: dict[str, float] | None = None,
    scraper: Callable[[str], dict[str, float]] = scrape,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    unreachable_is_idle: bool = False,
) -> DrainResult:
    """Poll until every in-flight gauge is 0 for ``settle_s`` without a break, or ``timeout_s`` passes.

    ``baseline`` is a sample taken when the gateway stopped routing here: with it the result counts
    the requests that arrived afterwards. A scrape that fails is an error in the result and resets
    the settle window (an engine that does not answer is not known to be idle), except with
    ``unreachable_is_idle`` for a group no gateway routes to whose engine is down: nothing can be
    running there.
    """
    t0 = clock()
    first = baseline
    result = DrainResult(idle=False, waited_s=0.0, settle_s=settle_s, timeout_s=timeout_s, polls=0)
    quiet_since: float | None = None
    while True:
        now = clock()
        try:
            sample = scraper(url)
        except MetricsError as exc:
            result.errors.append(str(exc))
            if unreachable_is_idle and result.polls == 0:
                result.idle = True
                return result
            quiet_since = None
            sample = None
        if sample is not None:
            result.polls += 1
            first = first if first is not None else sample
            work = in_flight(sample)
            result.last = work
            for k, v in work.items():
                result.peak[k] = max(result.peak.get(k, 0.0), v)
            result.new_requests = new_arrivals(first, sample)
            if any(v > 0 for v in work.values()):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            if quiet_since is not None and now - quiet_since >= settle_s:
                result.idle = True
                result.waited_s = now - t0
                return result
        if now - t0 >= timeout_s:
            result.waited_s = now - t0
            return result
        sleep(poll_s)
