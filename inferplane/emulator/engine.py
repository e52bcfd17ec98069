"""The emulated scheduler: admission, the per-role request pipelines, and the state metrics report.

Every request is one asyncio task that walks SGLang's stages for its role:

- unified: waiting queue -> prefill -> decode steps;
- prefill (PD): bootstrap queue (until the decode's handshake for the same room) -> waiting queue
  -> prefill -> inflight queue (KV ``put`` into Mooncake) -> one token, ``max_new_tokens`` forced to 1;
- decode (PD): prealloc queue (handshake with the prefill's bootstrap server, then a KV slot)
  -> transfer queue (until the prefill's KV is stored, then ``get`` and verify it) -> decode steps.

Admission is FIFO, bounded by ``--max-running-requests`` and the KV pool (``max_total_num_tokens``),
so a burst queues (``num_queue_reqs``), drains in order, and overload shows in ``token_usage``.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import logging
import math
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from inferplane.emulator import tokenizer
from inferplane.emulator.config import EngineConfig
from inferplane.emulator.faults import Faults
from inferplane.emulator.kv import (
    BootstrapError,
    DecodeKvClient,
    MooncakeKvStore,
    PrefillServerInfo,
    RoomRegistry,
    StoreUnavailable,
    TransferError,
)
from inferplane.emulator.metrics import EngineMetrics
from inferplane.emulator.model import EOS_TOKEN_ID, EmulatedModel, Sampling, parse_kv_payload

log = logging.getLogger("inferplane.emulator")

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
"""SGLang's health probes carry this host (disaggregation/utils.py): no KV moves for them."""
TICK_S = 0.005
"""Decode steps shorter than this are batched into one wake-up (and one stream frame)."""
IMAGE_TOKENS = 256
"""Prompt tokens one image occupies after the vision encoder (Qwen2.5-VL at 448x448)."""
PREFIX_BLOCK = 16
KV_LEASE_S = 11.0


class Aborted(Exception):
    """A request that ends with ``finish_reason.type == "abort"``; with a status it is an HTTP error."""

    def __init__(self, message: str = "Aborted", status_code: int | None = None, err_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.err_type = err_type

    def finish_reason(self) -> dict[str, Any]:
        return {"type": "abort", "message": self.message, "status_code": self.status_code, "err_type": self.err_type}


@dataclass(frozen=True)
class Bootstrap:
    host: str | None
    port: int | None
    room: int | None

    @property
    def fake(self) -> bool:
        return self.host == FAKE_BOOTSTRAP_HOST


@dataclass
class Request:
    """One generation request (one element of a batch) and everything that happens to it."""

    rid: str
    prompt_ids: list[int]
    sampling: Sampling
    stream: bool = False
    bootstrap: Bootstrap | None = None
    images: list[str] = field(default_factory=list)
    sample_index: int = 0
    log_metrics: bool = True
    # Filled in while it runs.
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: dict[str, Any] | None = None
    cached_tokens: int = 0
    created: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    queue_time: float = 0.0
    modelled_prefill_s: float = 0.0
    first_token_at: float | None = None
    finished_at: float | None = None
    stage: str = "new"
    abort_event: asyncio.Event = field(default_factory=asyncio.Event)
    updated: asyncio.Event = field(default_factory=asyncio.Event)
    waiter: asyncio.Future[None] | None = None
    aborted: Aborted | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    def abort(self, reason: Aborted) -> None:
        if self.aborted is None and self.finish_reason is None:
            self.aborted = reason
            self.abort_event.set()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(reason)

    def e2e_latency(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.started


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Admission:
    """FIFO admission into the running batch: a slot and the prompt's KV tokens, in arrival order."""

    def __init__(self, max_running: int, max_tokens: int) -> None:
        self.max_running = max_running
        self.max_tokens = max_tokens
        self.running = 0
        self.tokens = 0
        self.paused = False
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        return sum(1 for _, fut in self._waiters if not fut.done())

    def _fits(self, tokens: int) -> bool:
        # An oversized request still runs alone rather than waiting forever (SGLang retracts instead).
        return self.running < self.max_running and (self.tokens + tokens <= self.max_tokens or self.running == 0)

    async def acquire(self, tokens: int) -> None:
        if not self._waiters and not self.paused and self._fits(tokens):
            self.running += 1
            self.tokens += tokens
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (tokens, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(tokens)  # granted just as it was cancelled
            else:
                self._waiters.remove(entry)
            raise

    def grow(self, tokens: int) -> None:
        self.tokens += tokens

    def release(self, tokens: int) -> None:
        self.running -= 1
        self.tokens -= tokens
        self.pump()

    def pump(self) -> None:
        while self._waiters and not self.paused:
            tokens, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(tokens):
                return
            self._waiters.popleft()
            self.running += 1
            self.tokens += tokens
            fut.set_result(None)


class PrefixCache:
    """A radix cache at block granularity: how many leading prompt tokens a previous request computed."""

    def __init__(self, capacity_blocks: int = 200_000) -> None:
        self.capacity = capacity_blocks
        self._blocks: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def match_and_insert(self, ids: list[int]) -> int:
        cached, contiguous, h = 0, True, b""
        for start in range(0, len(ids) - len(ids) % PREFIX_BLOCK, PREFIX_BLOCK):
            block = ids[start : start + PREFIX_BLOCK]
            h = hashlib.blake2b(h + b"".join(i.to_bytes(8, "little", signed=True) for i in block), digest_size=16).digest()
            if contiguous and h in self._blocks:
                cached += PREFIX_BLOCK
                self._blocks.move_to_end(h)
            else:
                contiguous = False
                self._blocks[h] = None
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        # The last prompt token is always recomputed to produce the first output token.
        return min(cached, max(0, len(ids) - 1))

    def clear(self) -> None:
        self._blocks.clear()


class Window:
    """Sums of recent events, for throughput and hit-rate gauges."""

    def __init__(self, seconds: float = 5.0) -> None:
        self.seconds = seconds
        self._events: collections.deque[tuple[float, float, float]] = collections.deque()

    def add(self, a: float, b: float = 0.0) -> None:
        now = time.monotonic()
        self._events.append((now, a, b))
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._events and now - self._events[0][0] > self.seconds:
            self._events.popleft()

    def sums(self) -> tuple[float, float]:
        self._trim(time.monotonic())
        return sum(e[1] for e in self._events), sum(e[2] for e in self._events)


class Engine:
    def __init__(self, cfg: EngineConfig, faults: Faults, metrics: EngineMetrics) -> None:
        self.cfg = cfg
        self.faults = faults
        self.metrics = metrics
        self.admission = Admission(cfg.max_running_requests, cfg.max_total_num_tokens)
        self.prefix_cache = PrefixCache()
        self.requests: dict[str, Request] = {}
        self.stages: collections.Counter[str] = collections.Counter()
        self.rooms = RoomRegistry(max_age_s=max(cfg.bootstrap_timeout_s, cfg.waiting_timeout_s) + 60.0)
        self.store: MooncakeKvStore | None = None
        self.kv_client: DecodeKvClient | None = None
        self.session: aiohttp.ClientSession | None = None
        self.resume = asyncio.Event()
        self.resume.set()
        self.gracefully_exit = False
        self.last_receive = time.monotonic()
        self.tokens_window = Window()
        self.cache_window = Window(30.0)
        self.last_transfer = {"speed_gb_s": 0.0, "latency_ms": 0.0}
        self._rr = itertools.count()
        self._rid = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self.recent: collections.deque[Request] = collections.deque(maxlen=64)
        """The last finished requests, for diagnostics and tests."""

    # -- identity ---------------------------------------------------------------------------------

    @property
    def revision(self) -> str:
        return self.faults.wrong_revision or self.cfg.model.revision

    @property
    def model(self) -> EmulatedModel:
        return EmulatedModel(self.revision, self.cfg.model.kv_layout)

    def server_info_for_kv(self) -> PrefillServerInfo:
        layout = self.cfg.model.kv_layout
        signature = f"layers={layout.num_layers},kv_heads={layout.num_kv_heads},head_dim={layout.head_dim}"
        return PrefillServerInfo(layout.page_size, layout.kv_cache_dtype, signature, self.cfg.mooncake_local_hostname, self.cfg.port)

    def new_rid(self) -> str:
        return hashlib.blake2b(f"{time.time_ns()}-{next(self._rid)}".encode(), digest_size=16).hexdigest()

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self.session = aiohttp.ClientSession()
        self.kv_client = DecodeKvClient(self.session, self.server_info_for_kv())
        if self.cfg.is_pd and self.cfg.mooncake_master:
            self.store = MooncakeKvStore(
                self.cfg.mooncake_master,
                self.cfg.mooncake_metadata,
                self.cfg.mooncake_local_hostname,
                self.cfg.mooncake_segment_bytes,
            )
            self.store.start()

    async def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            await store.close()
        session, self.session = self.session, None
        if session is not None:
            await session.close()

    # -- stage bookkeeping ------------------------------------------------------------------------

    @contextmanager
    def stage(self, req: Request, name: str) -> Iterator[None]:
        req.stage = name
        self.stages[name] += 1
        try:
            yield
        finally:
            self.stages[name] -= 1

    @property
    def running(self) -> int:
        return self.stages["running"]

    async def _interruptible(self, req: Request, awaitable: Any) -> Any:
        """Await ``awaitable`` unless the request is aborted first (abort_request, pause, disconnect)."""
        task = asyncio.ensure_future(awaitable)
        aborter = asyncio.ensure_future(req.abort_event.wait())
        try:
            await asyncio.wait({task, aborter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            aborter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with_suppressed = asyncio.gather(task, return_exceptions=True)
        await with_suppressed
        assert req.aborted is not None
        raise req.aborted

    async def _sleep(self, req: Request, seconds: float) -> None:
        """Sleep unless aborted: one future and one timer, as this runs once per decode step."""
        if req.aborted is not None:
            raise req.aborted
        if seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _wake, waiter)
        req.waiter = waiter
        try:
            await waiter
        finally:
            timer.cancel()
            req.waiter = None

    # -- the request pipelines --------------------------------------------------------------------

    async def generate(self, req: Request) -> AsyncGenerator[Request, None]:
        """Run one request, yielding it after its steps; the last yield has ``finish_reason`` set.

        The request runs in its own task, as in SGLang's scheduler process: a consumer that goes away
        (client disconnect) aborts it, and the task then releases what it holds by itself.
        """
        if req.rid in self.requests:
            req.finish_reason = Aborted(f"Duplicate request ID detected: {req.rid}", 400).finish_reason()
            yield req
            return
        self.requests[req.rid] = req
        task = asyncio.create_task(self._run(req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            while True:
                await req.updated.wait()
                req.updated.clear()
                yield req
                if req.finish_reason is not None:
                    return
        finally:
            if req.finish_reason is None:
                req.abort(Aborted("Client disconnected"))

    async def _run(self, req: Request) -> None:
        try:
            await self._pipeline(req)
            self._record_finished(req)
        except Aborted as exc:
            self._finish_aborted(req, exc)
        except Exception as exc:  # a bug must end the request, not hang its client
            self._finish_aborted(req, Aborted(f"Internal error in the emulator: {type(exc).__name__}: {exc}", 500))
            log.exception("request %s failed", req.rid)
        finally:
            self.requests.pop(req.rid, None)
            self.recent.append(req)
            self.last_receive = time.monotonic()
            req.updated.set()

    def _finish_aborted(self, req: Request, exc: Aborted) -> None:
        req.finish_reason = exc.finish_reason()
        req.finished_at = time.perf_counter()
        if req.log_metrics:
            self.metrics.num_aborted.labels(**self.metrics.tokenizer_labels).inc()

    def _emit(self, req: Request) -> None:
        self.last_receive = time.monotonic()
        req.updated.set()

    async def _pipeline(self, req: Request) -> None:
        cfg = self.cfg
        b = req.bootstrap
        if cfg.is_pd and (b is None or b.room is None):
            raise Aborted(f"Invalid request: Disaggregated request received without bootstrap room id. req.rid={req.rid!r}", 400)
        if self.faults.slow_ms:
            await self._sleep(req, self.faults.slow_ms / 1000.0)
        if req.images and cfg.encoder_urls and cfg.role in ("unified", "prefill"):
            await self._interruptible(req, self._encode_images(req))
        if cfg.role == "prefill":
            req.sampling = replace(req.sampling, max_new_tokens=1, min_new_tokens=0)
        pd_transfer = cfg.is_pd and b is not None and not b.fake
        if pd_transfer and cfg.role == "prefill":
            await self._prefill_with_transfer(req)
        elif pd_transfer and cfg.role == "decode":
            await self._decode_with_transfer(req)
        else:
            await self._local(req)

    async def _admit(self, req: Request) -> None:
        t0 = time.perf_counter()
        with self.stage(req, "waiting"):
            await self._interruptible(req, self.admission.acquire(req.prompt_tokens))
        req.queue_time = time.perf_counter() - t0
        self.metrics.queue_time.labels(**self.metrics.labels).observe(req.queue_time)

    def _release(self, req: Request) -> None:
        self.admission.release(req.prompt_tokens + req.completion_tokens)

    async def _prefill_compute(self, req: Request) -> bytes:
        """Prefill forward: returns the KV fingerprint."""
        req.cached_tokens = self.prefix_cache.match_and_insert(req.prompt_ids)
        self.cache_window.add(req.cached_tokens, req.prompt_tokens)
        req.modelled_prefill_s = self.cfg.latency.prefill_s(req.prompt_tokens - req.cached_tokens)
        await self._sleep(req, req.modelled_prefill_s)
        return self.model.fingerprint(req.prompt_ids)

    async def _local(self, req: Request) -> None:
        await self._admit(req)
        try:
            with self.stage(req, "running"):
                fingerprint = await self._prefill_compute(req)
                seed = self.model.token_seed(fingerprint, req.sampling, req.sample_index)
                await self._decode_steps(req, seed, first_token=None)
        finally:
            self._release(req)

    async def _prefill_with_transfer(self, req: Request) -> None:
        b = req.bootstrap
        assert b is not None and b.room is not None
        room = b.room
        try:
            with self.stage(req, "prefill_bootstrap"):
                try:
                    await self._interruptible(req, self.rooms.wait_handshake(room, self.cfg.bootstrap_timeout_s))
                except TimeoutError:
                    self.metrics.num_bootstrap_failed.labels(**self.metrics.labels).inc()
                    raise Aborted(
                        f"Prefill bootstrap failed for request rank=0 req.rid={req.rid!r} req.bootstrap_room={room} "
                        f"with exception KVTransferError(bootstrap_room={room}): no decode handshake within "
                        f"{self.cfg.bootstrap_timeout_s:.0f}s",
                        500,
                    ) from None
            await self._admit(req)
            try:
                with self.stage(req, "running"):
                    fingerprint = await self._prefill_compute(req)
                    seed = self.model.token_seed(fingerprint, req.sampling, req.sample_index)
                    first = self.model.output_token(seed, 0, req.sampling)
                with self.stage(req, "prefill_inflight"):
                    await self._send_kv(req, room, fingerprint, first)
                self._append(req, [first], 0.0)
                req.finish_reason = {"type": "length", "length": 1}
                req.finished_at = time.perf_counter()
            finally:
                self._release(req)
        except BaseException as exc:
            self.rooms.fail(room, str(exc) or type(exc).__name__)
            raise

    async def _send_kv(self, req: Request, room: int, fingerprint: bytes, first_token: int) -> None:
        def failed(why: str) -> Aborted:
            self.metrics.num_transfer_failed.labels(**self.metrics.labels).inc()
            return Aborted(
                f"Failed to send KV for request rank=0 req.rid={req.rid!r} req.bootstrap_room={room} "
                f"with exception KVTransferError(bootstrap_room={room}): {why}",
                500,
            )

        if self.faults.kv_transfer_fail:
            raise failed("injected fault kv_transfer_fail")
        if self.store is None:
            raise failed("no KV store configured (--mooncake-master)")
        payload = self.model.kv_payload(fingerprint, req.prompt_tokens, self.cfg.kv_bytes_cap)
        key = f"sglang-emu/{self.cfg.mooncake_local_hostname}:{self.cfg.port}/{room}/{req.rid}"
        t0 = time.perf_counter()
        try:
            await self._interruptible(req, self.store.put(key, payload))
        except StoreUnavailable as exc:
            raise failed(str(exc)) from None
        seconds = max(time.perf_counter() - t0, 1e-6)
        total_mb = len(payload) / (1024 * 1024)
        speed = (total_mb / 1024) / seconds
        self.last_transfer = {"speed_gb_s": round(speed, 3), "latency_ms": round(seconds * 1000, 3)}
        self.metrics.observe_kv_transfer(seconds * 1000, total_mb, speed)
        self.rooms.complete(
            room,
            {"key": key, "nbytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest(), "first_token": first_token},
        )
        # Unclaimed KV (the decode failed) is freed after the decode's wait is over.
        self.store.remove_later(key, self.cfg.waiting_timeout_s + KV_LEASE_S)

    async def _decode_with_transfer(self, req: Request) -> None:
        b = req.bootstrap
        assert b is not None and b.room is not None and self.kv_client is not None
        room = b.room
        t_enter = time.perf_counter()
        with self.stage(req, "decode_prealloc"):
            try:
                await self._interruptible(req, self.kv_client.handshake(b.host, b.port, self.cfg.bootstrap_timeout_s))
            except BootstrapError as exc:
                self.metrics.num_bootstrap_failed.labels(**self.metrics.labels).inc()
                raise Aborted(
                    f"Decode handshake failed for request rank=0 req.rid={req.rid!r} req.bootstrap_room={room} with exception {exc}", 500
                ) from None
            t_boot = time.perf_counter()
            await self._interruptible(req, self.admission.acquire(req.prompt_tokens))
            t_alloc = time.perf_counter()
        self.metrics.observe_kv_bootstrap((t_boot - t_enter) * 1000, (t_alloc - t_boot) * 1000)
        req.queue_time = t_alloc - t_boot
        self.metrics.queue_time.labels(**self.metrics.labels).observe(req.queue_time)
        try:
            with self.stage(req, "decode_transfer"):
                fingerprint, first = await self._receive_kv(req, room)
            with self.stage(req, "running"):
                seed = self.model.token_seed(fingerprint, req.sampling, req.sample_index)
                await self._decode_steps(req, seed, first_token=first)
        finally:
            self._release(req)

    async def _receive_kv(self, req: Request, room: int) -> tuple[bytes, int]:
        b = req.bootstrap
        assert b is not None and b.host is not None and b.port is not None and self.kv_client is not None

        def failed(why: str) -> Aborted:
            self.metrics.num_transfer_failed.labels(**self.metrics.labels).inc()
            return Aborted(
                f"Decode transfer failed for request rank=0 req.rid={req.rid!r} req.bootstrap_room={room} "
                f"with exception KVTransferError(bootstrap_room={room}): {why}",
                500,
            )

        try:
            info = await self._interruptible(req, self.kv_client.wait_room(b.host, b.port, room, self.cfg.waiting_timeout_s))
        except TransferError as exc:
            raise failed(str(exc)) from None
        if self.faults.kv_transfer_fail:
            raise failed("injected fault kv_transfer_fail")
        if self.store is None:
            raise failed("no KV store configured (--mooncake-master)")
        try:
            payload = await self._interruptible(req, self.store.get(info["key"]))
        except StoreUnavailable as exc:
            raise failed(str(exc)) from None
        if len(payload) != info["nbytes"] or hashlib.sha256(payload).hexdigest() != info["sha256"]:
            raise failed(f"KV bytes for {info['key']} differ from what the prefill sent ({len(payload)} of {info['nbytes']} bytes)")
        try:
            fingerprint, kv_tokens = parse_kv_payload(payload)
        except ValueError as exc:
            raise failed(str(exc)) from None
        if kv_tokens != req.prompt_tokens:
            raise failed(f"KV covers {kv_tokens} prompt tokens, this request has {req.prompt_tokens}")
        self.store.remove_later(info["key"], KV_LEASE_S)
        return fingerprint, int(info["first_token"])

    async def _decode_steps(self, req: Request, seed: bytes, first_token: int | None) -> None:
        """Emit tokens until a stop condition. ``first_token`` comes from the prefill in PD mode."""
        s = req.sampling
        if s.max_new_tokens <= 0:
            req.finish_reason = {"type": "length", "length": 0}
            req.finished_at = time.perf_counter()
            return
        first = first_token if first_token is not None else self.model.output_token(seed, 0, s)
        self._append(req, [first], 0.0)
        if req.finish_reason is None and req.completion_tokens >= s.max_new_tokens:
            req.finish_reason = {"type": "length", "length": s.max_new_tokens}
        if req.finish_reason is not None:
            req.finished_at = time.perf_counter()
            return
        self._emit(req)
        while req.finish_reason is None:
            if not self.resume.is_set():
                await self._interruptible(req, self.resume.wait())
            itl = self.cfg.latency.itl_s(self.running)
            k = max(1, min(s.max_new_tokens - req.completion_tokens, math.ceil(TICK_S / itl) if itl > 0 else 1 << 20))
            await self._sleep(req, itl * k)
            start = req.completion_tokens
            self._append(req, [self.model.output_token(seed, i, s) for i in range(start, start + k)], itl)
            if req.finish_reason is None and req.completion_tokens >= s.max_new_tokens:
                req.finish_reason = {"type": "length", "length": s.max_new_tokens}
            if req.finish_reason is not None:
                req.finished_at = time.perf_counter()
            else:
                self._emit(req)

    def _append(self, req: Request, ids: list[int], itl: float) -> None:
        """Add generated tokens, applying stop tokens and stop strings (only after min_new_tokens)."""
        s = req.sampling
        now = time.perf_counter()
        if req.first_token_at is None:
            req.first_token_at = now
            if req.log_metrics:
                self.metrics.ttft.labels(**self.metrics.streaming(req.stream)).observe(now - req.started)
        elif req.log_metrics:
            child = self.metrics.itl.labels(**self.metrics.tokenizer_labels)
            for _ in ids:
                child.observe(itl)
        already = len(req.output_ids)
        for token in ids:
            req.output_ids.append(token)
            self.admission.grow(1)
            self.tokens_window.add(1)
            if token == EOS_TOKEN_ID and not s.ignore_eos:
                req.finish_reason = {"type": "stop", "matched": token}
                req.text = tokenizer.decode(req.output_ids[:-1])
                return
            if req.completion_tokens <= s.min_new_tokens:
                continue
            if token in s.stop_token_ids:
                req.finish_reason = {"type": "stop", "matched": token}
                req.text = tokenizer.decode(req.output_ids[:-1])
                return
            if s.stop:
                text = tokenizer.decode(req.output_ids)
                hits = [(text.find(stop), stop) for stop in s.stop if stop and stop in text]
                if hits:
                    at, stop = min(hits)
                    req.finish_reason = {"type": "stop", "matched": stop}
                    req.text = text[:at]
                    return
        req.text += tokenizer.decode(req.output_ids[already:])

    def _record_finished(self, req: Request) -> None:
        if not req.log_metrics:
            return
        m = self.metrics
        labels = m.streaming(req.stream)
        m.prompt_tokens.labels(**labels).inc(req.prompt_tokens)
        m.generation_tokens.labels(**labels).inc(req.completion_tokens)
        m.num_requests.labels(**labels).inc()
        m.cached_tokens.labels(**m.tokenizer_labels, cache_source="device").inc(req.cached_tokens)
        m.cached_tokens.labels(**m.tokenizer_labels, cache_source="total").inc(req.cached_tokens)
        m.e2e.labels(**labels).observe(req.e2e_latency())
        m.prompt_tokens_histogram.labels(**m.tokenizer_labels).observe(req.prompt_tokens)
        m.generation_tokens_histogram.labels(**m.tokenizer_labels).observe(req.completion_tokens)
        if m.tpot is not None and req.completion_tokens > 1 and req.first_token_at is not None and req.finished_at is not None:
            m.tpot.labels(**labels).observe((req.finished_at - req.first_token_at) / (req.completion_tokens - 1))

    # -- encoders (EPD language side) -------------------------------------------------------------

    async def _encode_images(self, req: Request) -> None:
        assert self.session is not None
        url = self.cfg.encoder_urls[next(self._rr) % len(self.cfg.encoder_urls)]
        body = {"req_id": req.rid, "modality": "image", "mm_items": req.images, "num_parts": 1, "part_idx": 0}
        try:
            async with self.session.post(f"{url}/encode", json=body, timeout=aiohttp.ClientTimeout(total=60)) as resp:
                if resp.status != 200:
                    raise Aborted(f"Encoder {url} failed for req_id={req.rid}: HTTP {resp.status} {(await resp.text())[:200]}", 500)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Aborted(f"Encoder {url} unreachable for req_id={req.rid}: {type(exc).__name__}: {exc}", 503) from None

    # -- control ----------------------------------------------------------------------------------

    def abort(self, rid: str | None, abort_all: bool) -> int:
        hits = [r for r in self.requests.values() if abort_all or r.rid == rid]
        for r in hits:
            r.abort(Aborted("Abort in waiting queue" if r.stage in ("waiting", "new") else "Aborted"))
        return len(hits)

    def pause(self, mode: str) -> None:
        self.admission.paused = True
        self.resume.clear()
        if mode == "abort":
            self.abort(None, abort_all=True)

    def unpause(self) -> None:
        self.admission.paused = False
        self.resume.set()
        self.admission.pump()

    def flush_cache(self) -> bool:
        if self.requests:
            return False
        self.prefix_cache.clear()
        return True

    # -- what metrics and /v1/loads report --------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        adm = self.admission
        tokens, _ = self.tokens_window.sums()
        cached, prompt = self.cache_window.sums()
        running = self.running
        waiting = adm.waiting
        prefill_bootstrap = self.stages["prefill_bootstrap"]
        prefill_inflight = self.stages["prefill_inflight"]
        decode_prealloc = self.stages["decode_prealloc"]
        decode_transfer = self.stages["decode_transfer"]
        seq_lens = sum(r.prompt_tokens + r.completion_tokens for r in self.requests.values() if r.stage == "running")
        return {
            "num_running_reqs": running,
            "num_waiting_reqs": waiting + prefill_bootstrap + decode_prealloc + decode_transfer,
            "num_queue_reqs": waiting,
            "num_used_tokens": adm.tokens,
            "max_total_num_tokens": self.cfg.max_total_num_tokens,
            "max_running_requests": self.cfg.max_running_requests,
            "token_usage": round(min(1.0, adm.tokens / self.cfg.max_total_num_tokens), 4),
            "gen_throughput": round(tokens / self.tokens_window.seconds, 2),
            "cache_hit_rate": round(cached / prompt, 4) if prompt else 0.0,
            "utilization": round(adm.running / self.cfg.max_running_requests, 4),
            "decode_sum_seq_lens": seq_lens,
            "num_paused_reqs": waiting if adm.paused else 0,
            "prefill_bootstrap": prefill_bootstrap,
            "prefill_inflight": prefill_inflight,
            "decode_prealloc": decode_prealloc,
            "decode_transfer": decode_transfer,
        }

    def refresh_gauges(self) -> None:
        m = self.metrics
        if self.cfg.role == "encoder":
            return
        snap = self.snapshot()
        values = {
            "sglang:num_running_reqs": snap["num_running_reqs"],
            "sglang:num_queue_reqs": snap["num_queue_reqs"],
            "sglang:num_grammar_queue_reqs": 0,
            "sglang:gen_throughput": snap["gen_throughput"],
            "sglang:cache_hit_rate": snap["cache_hit_rate"],
            "sglang:decode_sum_seq_lens": snap["decode_sum_seq_lens"],
            "sglang:token_usage": snap["token_usage"],
            "sglang:num_used_tokens": snap["num_used_tokens"],
            "sglang:num_retracted_reqs": 0,
            "sglang:num_paused_reqs": snap["num_paused_reqs"],
            "sglang:num_prefill_inflight_queue_reqs": snap["prefill_inflight"],
            "sglang:num_decode_prealloc_queue_reqs": snap["decode_prealloc"],
            "sglang:num_decode_transfer_queue_reqs": snap["decode_transfer"],
            "sglang:pending_prealloc_token_usage": 0.0,
            "sglang:utilization": snap["utilization"],
            "sglang:new_token_ratio": 0.7,
            "sglang:is_cuda_graph": 1.0 if snap["num_running_reqs"] and self.cfg.role != "prefill" else 0.0,
            "sglang:max_total_num_tokens": self.cfg.max_total_num_tokens,
            "sglang:context_len": self.cfg.context_length,
            "sglang:page_size": self.cfg.model.kv_layout.page_size,
        }
        bootstrap_gauge = "sglang:num_prefill_bootstrap_queue_reqs" if m.modern else "sglang:num_prefill_prealloc_queue_reqs"
        values[bootstrap_gauge] = snap["prefill_bootstrap"]
        for name, value in values.items():
            m.set_gauge(name, float(value))
