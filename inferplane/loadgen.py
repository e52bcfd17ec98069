"""Open-loop load generator: requests arrive on a schedule, whether or not earlier ones finished.

Reports sent/ok/failed, status counts, TTFT/TPOT/E2E percentiles and every request that reached a
worker while it was marked draining. Used by `inferplane load`, the integration tests, the upgrade
test ("0 requests sent to a draining group") and the benchmarks.

Draining is observed, never assumed. The gateway's ``GET /workers`` (status ``draining``, or gone
after draining) and the caller's file/callback are polled; each stretch a worker is seen draining
is a window from the first to the last poll that saw it (it closes when the worker is listed again
as not draining, e.g. re-added after an upgrade). A request is a draining hit when SMG's
``x-smg-routed-worker-id`` header (the decode worker in PD) names a worker whose window covers the
moment the request was sent: the drain was already visible, so a hit is never a race. Prefill
workers do not appear in that header; for them the gateway's own per-worker counter
(``smg_worker_requests_total{worker}``, sampled at the same polls) must not grow inside a window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Api = Literal["generate", "chat", "completions"]
ROUTED_HEADER = "x-smg-routed-worker-id"


@dataclass(frozen=True)
class LoadSpec:
    url: str
    rate: float
    duration: float
    concurrency: int = 0  # most requests in flight; 0 = unbounded (pure open loop)
    prompt_tokens: int = 64
    max_new_tokens: int = 16
    stream: bool = False
    api: Api = "generate"
    model: str | None = None
    arrival: Literal["poisson", "uniform"] = "poisson"
    seed: int = 0
    timeout_s: float = 120.0
    # Draining observation: the gateway whose GET /workers and /metrics are polled (None: no polling).
    gateway_url: str | None = None
    gateway_metrics_url: str | None = None
    gateway_headers: dict[str, str] = field(default_factory=dict)
    poll_interval_s: float = 0.25
    draining_file: Path | None = None  # one worker URL per line, re-read at every poll
    draining: Callable[[], Iterable[str]] | None = None  # Python callers: URLs draining right now
    # Python callers: arrivals stop once this is set (a load that lasts exactly as long as a rollout).
    stop: threading.Event | None = None


@dataclass
class RequestResult:
    index: int
    sent_at: float  # seconds since the run started
    status: int  # 0: no HTTP response
    ok: bool
    routed_worker: str | None
    e2e_s: float | None = None
    ttft_s: float | None = None
    output_tokens: int = 0
    error: str | None = None
    late_s: float = 0.0  # how long the concurrency cap held it after its scheduled time


@dataclass
class DrainingHit:
    index: int
    worker: str
    sent_at: float
    marked_at: float
    status: int


@dataclass
class LoadReport:
    sent: int
    ok: int
    failed: int
    duration_s: float
    achieved_rate: float
    status_counts: dict[str, int]
    ttft_s: dict[str, float | None]
    tpot_s: dict[str, float | None]
    e2e_s: dict[str, float | None]
    output_tokens: int
    late: int
    routed: dict[str, int]
    draining_observed: dict[str, float]  # worker URL -> first seen draining (s since start)
    draining_windows: list[dict[str, Any]]  # every DrainWindow: worker, opened, last, closed, counter samples
    draining_hits: list[DrainingHit]
    draining_gateway_counts: dict[str, float]  # worker URL -> requests SMG counted while it was seen draining
    errors: list[str]

    @property
    def draining_hit_count(self) -> int:
        """Requests that reached a worker already seen draining: per worker the larger of what the
        response headers show and what the gateway counted (the two overlap for decode workers)."""
        by_header = Counter(h.worker for h in self.draining_hits)
        workers = set(by_header) | set(self.draining_gateway_counts)
        return sum(max(by_header.get(w, 0), int(self.draining_gateway_counts.get(w, 0))) for w in workers)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["draining_hit_count"] = self.draining_hit_count
        return out


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 by linear interpolation between closest ranks, plus mean and count."""
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "n": 0}
    data = sorted(values)

    def q(p: float) -> float:
        pos = (len(data) - 1) * p
        lo = int(pos)
        hi = min(lo + 1, len(data) - 1)
        return data[lo] + (data[hi] - data[lo]) * (pos - lo)

    return {"p50": q(0.50), "p95": q(0.95), "p99": q(0.99), "mean": sum(data) / len(data), "n": len(data)}


def arrivals(spec: LoadSpec) -> list[float]:
    """Scheduled send times (s from start): a seeded Poisson process, or evenly spaced."""
    if spec.rate <= 0 or spec.duration <= 0:
        return []
    if spec.arrival == "uniform":
        n = int(spec.rate * spec.duration)
        return [i / spec.rate for i in range(n)]
    rng = random.Random(spec.seed)
    out, t = [], rng.expovariate(spec.rate)
    while t < spec.duration:
        out.append(t)
        t += rng.expovariate(spec.rate)
    return out


def prompt(spec: LoadSpec, index: int) -> str:
    # One word per token (the emulator's tokenizer and any BPE keep short words whole); distinct
    # per request so cache-aware routing spreads them as it would real traffic.
    return " ".join(f"w{(index * 7919 + i) % 10007}" for i in range(spec.prompt_tokens))


def request_body(spec: LoadSpec, index: int) -> tuple[str, dict[str, Any]]:
    text = prompt(spec, index)
    if spec.api == "generate":
        body: dict[str, Any] = {
            "text": text,
            "sampling_params": {"max_new_tokens": spec.max_new_tokens, "temperature": 0},
            "stream": spec.stream,
        }
        path = "/generate"
    elif spec.api == "chat":
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": spec.max_new_tokens, "temperature": 0, "stream": spec.stream}
        path = "/v1/chat/completions"
    else:
        body = {"prompt": text, "max_tokens": spec.max_new_tokens, "temperature": 0, "stream": spec.stream}
        path = "/v1/completions"
    if spec.api != "generate" or spec.model:
        body["model"] = spec.model or "default"
    if spec.stream and spec.api != "generate":
        body["stream_options"] = {"include_usage": True}
    return path, body


def _tokens(payload: dict[str, Any]) -> int | None:
    meta = payload.get("meta_info")
    if isinstance(meta, dict) and isinstance(meta.get("completion_tokens"), int):
        return int(meta["completion_tokens"])
    usage = payload.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    if isinstance(payload.get("output_ids"), list):
        return len(payload["output_ids"])
    return None


def _has_output(payload: dict[str, Any]) -> bool:
    if payload.get("output_ids") or payload.get("text"):
        return True
    for choice in payload.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text"):
            return True
    return False


@dataclass
class DrainWindow:
    """One stretch during which a worker was observed draining (or removed after draining).

    ``opened``/``last`` are the first and the last poll (s since start) that saw it so: the worker
    was certainly draining in between. The gateway's per-worker request counter is sampled at the
    same polls while the worker is still listed (SMG drops a worker's series when it removes it).
    """

    worker: str
    opened: float
    last: float
    closed: bool = False
    count_first: float | None = None
    count_last: float | None = None

    def covers(self, t: float) -> bool:
        return self.opened < t <= self.last


class _DrainWatch:
    def __init__(self, spec: LoadSpec, t0: float) -> None:
        self.spec = spec
        self.t0 = t0
        self.windows: list[DrainWindow] = []
        self.errors: list[str] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    def open_window(self, url: str) -> DrainWindow | None:
        return next((w for w in self.windows if w.worker == url and not w.closed), None)

    def observe(self, at: float, draining: set[str], listed: set[str] | None, counts: dict[str, float]) -> None:
        """One poll: ``draining`` workers (gateway status or the caller's list), ``listed`` every
        worker the gateway lists (None when the gateway was not asked or did not answer)."""
        for url in draining:
            window = self.open_window(url)
            if window is None:
                window = DrainWindow(url, opened=at, last=at)
                self.windows.append(window)
            window.last = at
            if url in counts:
                window.count_first = counts[url] if window.count_first is None else window.count_first
                window.count_last = counts[url]
        for window in self.windows:
            if window.closed or window.worker in draining:
                continue
            if listed is not None and window.worker not in listed:
                window.last = at  # removed after draining: nothing may be routed to it
            elif listed is not None or not self.spec.gateway_url:
                window.closed = True  # listed again and not draining (re-added), or the caller's list dropped it

    def external(self) -> set[str]:
        urls: set[str] = set()
        if self.spec.draining_file is not None:
            with contextlib.suppress(OSError):
                urls |= {line.strip() for line in self.spec.draining_file.read_text().splitlines() if line.strip()}
        if self.spec.draining is not None:
            urls |= set(self.spec.draining())
        return {u.rstrip("/") for u in urls if u}

    async def poll_once(self, session: Any) -> None:
        at = self.now()
        draining = self.external()
        listed: set[str] | None = None
        if self.spec.gateway_url:
            try:
                async with session.get(self.spec.gateway_url + "/workers", headers=self.spec.gateway_headers) as resp:
                    if resp.status == 200:
                        body = await resp.json(content_type=None)
                        workers = body.get("workers", [])
                        listed = {w["url"].rstrip("/") for w in workers}
                        draining |= {w["url"].rstrip("/") for w in workers if w.get("status") == "draining"}
            except Exception as exc:  # a gateway restart must not end the run
                self.errors.append(f"GET /workers: {exc!r}")
        # Sampled after /workers: a request the counter shows beyond the first sample was routed
        # after the drain was visible.
        counts = await self.gateway_counts(session) if draining and self.spec.gateway_metrics_url else {}
        self.observe(at, draining, listed, counts)

    async def gateway_counts(self, session: Any) -> dict[str, float]:
        """smg_worker_requests_total by worker URL (summed over models)."""
        out: dict[str, float] = {}
        if not self.spec.gateway_metrics_url:
            return out
        try:
            async with session.get(self.spec.gateway_metrics_url) as resp:
                text = await resp.text()
        except Exception as exc:
            self.errors.append(f"GET gateway metrics: {exc!r}")
            return out
        for line in text.splitlines():
            if line.startswith("smg_worker_requests_total{"):
                labels, _, value = line.rpartition(" ")
                worker = _label(labels, "worker")
                if worker:
                    out[worker.rstrip("/")] = out.get(worker.rstrip("/"), 0.0) + float(value)
        return out

    async def run(self, session: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.poll_once(session)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.spec.poll_interval_s)


def _label(series: str, name: str) -> str | None:
    key = f'{name}="'
    start = series.find(key)
    if start < 0:
        return None
    start += len(key)
    return series[start : series.find('"', start)]


async def _one(session: Any, spec: LoadSpec, index: int, t0: float, scheduled: float, sem: asyncio.Semaphore | None) -> RequestResult:
    if sem is not None:
        await sem.acquire()
    try:
        sent = time.monotonic()
        result = RequestResult(
            index=index, sent_at=sent - t0, status=0, ok=False, routed_worker=None, late_s=max(0.0, sent - t0 - scheduled)
        )
        path, body = request_body(spec, index)
        try:
            async with session.post(spec.url + path, json=body) as resp:
                result.status = resp.status
                routed = resp.headers.get(ROUTED_HEADER)
                result.routed_worker = routed.rstrip("/") if routed else None
                if spec.stream and resp.status == 200:
                    await _read_stream(resp, result, sent)
                else:
                    raw = await resp.read()
                    result.e2e_s = time.monotonic() - sent
                    _judge_body(raw, result)
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"[:300]
        if result.e2e_s is None:
            result.e2e_s = time.monotonic() - sent
        return result
    finally:
        if sem is not None:
            sem.release()


def _judge_body(raw: bytes, result: RequestResult) -> None:
    try:
        payload = json.loads(raw)
    except ValueError:
        result.error = f"HTTP {result.status}: not JSON: {raw[:120]!r}"
        return
    if result.status != 200:
        result.error = f"HTTP {result.status}: {raw[:200].decode(errors='replace')}"
        return
    # An engine can answer 200 with an error body (SMG relays it): that is a failure.
    if isinstance(payload, dict) and "error" in payload:
        result.error = f"HTTP 200 with error body: {str(payload['error'])[:200]}"
        return
    result.output_tokens = (_tokens(payload) if isinstance(payload, dict) else None) or 0
    result.ok = True


async def _read_stream(resp: Any, result: RequestResult, sent: float) -> None:
    last: dict[str, Any] = {}
    chunks = 0
    done = False
    buffer = b""
    async for raw in resp.content.iter_any():
        buffer += raw
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                continue
            try:
                payload = json.loads(data)
            except ValueError:
                continue
            if isinstance(payload, dict) and "error" in payload:
                result.error = f"stream error: {str(payload['error'])[:200]}"
                continue
            if result.ttft_s is None and _has_output(payload):
                result.ttft_s = time.monotonic() - sent
            if _has_output(payload):
                chunks += 1
            last = payload
    result.e2e_s = time.monotonic() - sent
    if result.error is None and not done:
        result.error = "stream ended without [DONE]"
    result.output_tokens = _tokens(last) or chunks
    result.ok = result.error is None


async def run_load(spec: LoadSpec) -> LoadReport:
    import aiohttp

    schedule = arrivals(spec)
    sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency > 0 else None
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    # No connection limit beyond the concurrency cap: an open-loop generator must not queue silently.
    connector = aiohttp.TCPConnector(limit=0)
    t0 = time.monotonic()
    watch = _DrainWatch(spec, t0)
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        polling = bool(spec.gateway_url or spec.draining_file or spec.draining)
        if polling:
            await watch.poll_once(session)
        poller = asyncio.create_task(watch.run(session, stop)) if polling else None
        tasks: list[asyncio.Task[RequestResult]] = []
        for i, at in enumerate(schedule):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if spec.stop is not None and spec.stop.is_set():
                break
            tasks.append(asyncio.create_task(_one(session, spec, i, t0, at, sem)))
        results = list(await asyncio.gather(*tasks))
        if poller is not None:
            await watch.poll_once(session)
            stop.set()
            await poller
    elapsed = time.monotonic() - t0
    return _report(results, watch, elapsed)


def _report(results: list[RequestResult], watch: _DrainWatch, elapsed: float) -> LoadReport:
    statuses: Counter[str] = Counter()
    for r in results:
        statuses[str(r.status) if r.status else (r.error or "error").split(":", 1)[0]] += 1
    ok = [r for r in results if r.ok]
    tpot = [
        (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok if r.ttft_s is not None and r.e2e_s is not None and r.output_tokens > 1
    ]
    hits = []
    for r in results:
        window = next((w for w in watch.windows if w.worker == r.routed_worker and w.covers(r.sent_at)), None)
        if window is not None and r.routed_worker:
            hits.append(DrainingHit(r.index, r.routed_worker, r.sent_at, window.opened, r.status))
    gateway_counts: dict[str, float] = {}
    for w in watch.windows:
        if w.count_first is not None and w.count_last is not None and w.count_last > w.count_first:
            gateway_counts[w.worker] = gateway_counts.get(w.worker, 0.0) + w.count_last - w.count_first
    observed: dict[str, float] = {}
    for w in watch.windows:
        observed.setdefault(w.worker, w.opened)
    errors = [f"#{r.index}: {r.error}" for r in results if r.error][:10] + watch.errors[:5]
    return LoadReport(
        sent=len(results),
        ok=len(ok),
        failed=len(results) - len(ok),
        duration_s=elapsed,
        achieved_rate=len(results) / elapsed if elapsed > 0 else 0.0,
        status_counts=dict(sorted(statuses.items())),
        ttft_s=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_s=percentiles(tpot),
        e2e_s=percentiles([r.e2e_s for r in ok if r.e2e_s is not None]),
        output_tokens=sum(r.output_tokens for r in ok),
        late=sum(1 for r in results if r.late_s > 0.01),
        routed=dict(sorted(Counter(r.routed_worker for r in results if r.routed_worker).items())),
        draining_observed=observed,
        draining_windows=[asdict(w) for w in watch.windows],
        draining_hits=hits,
        draining_gateway_counts=gateway_counts,
        errors=errors,
    )


def run_load_sync(spec: LoadSpec) -> LoadReport:
    return asyncio.run(run_load(spec))


class BackgroundLoad:
    """Run a load in a thread while the caller does something else (a drain, an upgrade)::

    with BackgroundLoad(spec) as load:
        run_the_upgrade()
    report = load.report
    """

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.report: LoadReport | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inferplane-load", daemon=True)

    def _run(self) -> None:
        try:
            self.report = run_load_sync(self.spec)
        except BaseException as exc:
            self.error = exc

    def start(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> LoadReport:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("load still running")
        if self.error is not None:
            raise self.error
        assert self.report is not None
        return self.report

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._thread.join()


def render(report: LoadReport) -> str:
    def ms(stats: dict[str, float | None]) -> str:
        if not stats.get("n"):
            return "-"
        return " / ".join(f"{(stats[k] or 0) * 1000:.1f}" for k in ("p50", "p95", "p99"))

    lines = [
        f"sent {report.sent}  ok {report.ok}  failed {report.failed}  in {report.duration_s:.1f}s ({report.achieved_rate:.1f} req/s)"
        + (f"  late {report.late}" if report.late else ""),
        "status: " + ", ".join(f"{k}={v}" for k, v in report.status_counts.items()),
        f"latency ms p50 / p95 / p99:  TTFT {ms(report.ttft_s)}   TPOT {ms(report.tpot_s)}   E2E {ms(report.e2e_s)}",
        f"output tokens {report.output_tokens}",
    ]
    if report.routed:
        lines.append("routed (decode): " + ", ".join(f"{u}={n}" for u, n in report.routed.items()))
    if report.draining_observed:
        lines.append("seen draining: " + ", ".join(f"{u} at {t:.1f}s" for u, t in report.draining_observed.items()))
    lines.append(f"requests to a draining worker: {report.draining_hit_count}")
    for h in report.draining_hits[:10]:
        lines.append(f"  #{h.index} -> {h.worker} sent at {h.sent_at:.2f}s, draining since {h.marked_at:.2f}s (HTTP {h.status})")
    for url, n in report.draining_gateway_counts.items():
        lines.append(f"  gateway counted {n:.0f} request(s) to {url} after it was seen draining")
    lines += [f"error {e}" for e in report.errors[:5]]
    return "\n".join(lines)
