"""The load generator against a small aiohttp server that plays SMG: routing header, /workers
with a draining worker, /metrics with per-worker counters, streaming frames and error bodies."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from inferplane.loadgen import LoadSpec, arrivals, percentiles, run_load

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

A, B = "http://127.0.0.1:1/a", "http://127.0.0.1:1/b"


class FakeGateway:
    """Routes alternately to A and B; after ``drain_after`` requests B turns draining (and, if
    ``obey`` is false, keeps receiving traffic: the bug the load generator must catch)."""

    def __init__(self, drain_after: int | None = None, obey: bool = True, error_every: int = 0, readd_after: int | None = None) -> None:
        self.drain_after = drain_after
        self.readd_after = readd_after
        self.obey = obey
        self.error_every = error_every
        self.n = 0
        self.counts = {A: 0, B: 0}
        self.draining = False

    def route(self) -> str:
        self.n += 1
        if self.drain_after is not None and self.n > self.drain_after:
            self.draining = True
        if self.readd_after is not None and self.n > self.readd_after and self.draining:
            # Re-added after maintenance: a new registration, its counter starts again at 0 (as SMG's).
            self.draining, self.drain_after, self.counts[B] = False, None, 0
        if self.draining and self.obey:
            return A
        return A if self.n % 2 else B

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        worker = self.route()
        self.counts[worker] += 1
        headers = {"x-smg-routed-worker-id": worker}
        n = body["sampling_params"]["max_new_tokens"]
        if self.error_every and self.n % self.error_every == 0:
            return web.json_response({"error": {"message": "boom"}}, headers=headers)
        if not body.get("stream"):
            await asyncio.sleep(0.01)
            return web.json_response(
                {"text": "x" * n, "output_ids": list(range(n)), "meta_info": {"completion_tokens": n}}, headers=headers
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await resp.prepare(request)
        for i in range(1, n + 1):
            await asyncio.sleep(0.005)
            frame = {"text": "x" * i, "output_ids": list(range(i)), "meta_info": {"completion_tokens": i}}
            await resp.write(f"data: {json.dumps(frame)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def workers(self, request: web.Request) -> web.Response:
        assert request.headers.get("Authorization") == "Bearer adm"
        ws = [{"url": A, "status": "ready"}, {"url": B, "status": "draining" if self.draining else "ready"}]
        return web.json_response({"workers": ws})

    async def metrics(self, _request: web.Request) -> web.Response:
        lines = [f'smg_worker_requests_total{{model="m",worker="{u}"}} {c}' for u, c in self.counts.items()]
        return web.Response(text="\n".join(lines) + "\n")


@contextlib.asynccontextmanager
async def serve(gw: FakeGateway) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/generate", gw.generate)
    app.router.add_get("/workers", gw.workers)
    app.router.add_get("/metrics", gw.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def load(gw: FakeGateway, **kw: Any) -> Any:
    async with serve(gw) as url:
        spec = LoadSpec(
            url=url,
            gateway_url=url,
            gateway_metrics_url=url + "/metrics",
            gateway_headers={"Authorization": "Bearer adm"},
            poll_interval_s=0.02,
            **kw,
        )
        return await run_load(spec)


def test_percentiles_interpolate_between_ranks() -> None:
    stats = percentiles([float(i) for i in range(1, 101)])
    assert stats["p50"] == pytest.approx(50.5) and stats["p99"] == pytest.approx(99.01) and stats["n"] == 100
    assert percentiles([])["p50"] is None


def test_arrivals_are_seeded_and_open_loop() -> None:
    spec = LoadSpec(url="http://x", rate=50, duration=2, seed=3)
    assert arrivals(spec) == arrivals(spec)
    assert 60 < len(arrivals(spec)) < 140
    assert arrivals(LoadSpec(url="http://x", rate=10, duration=1, arrival="uniform")) == [i / 10 for i in range(10)]


def test_counts_ok_and_streaming_latencies() -> None:
    report = asyncio.run(load(FakeGateway(), rate=40, duration=0.5, stream=True, max_new_tokens=5))
    assert report.sent > 0 and report.ok == report.sent and report.failed == 0
    assert report.status_counts == {"200": report.sent}
    assert report.ttft_s["n"] == report.sent and report.tpot_s["n"] == report.sent
    assert report.e2e_s["p50"] >= report.ttft_s["p50"]  # type: ignore[operator]
    assert report.output_tokens == 5 * report.sent
    assert set(report.routed) == {A, B}
    assert report.draining_hit_count == 0


def test_a_200_with_an_error_body_is_a_failure() -> None:
    report = asyncio.run(load(FakeGateway(error_every=2), rate=40, duration=0.5))
    assert report.failed > 0 and report.ok + report.failed == report.sent
    assert any("error body" in e for e in report.errors)


def test_no_hit_when_the_gateway_stops_routing_to_the_draining_worker() -> None:
    report = asyncio.run(load(FakeGateway(drain_after=10, obey=True), rate=100, duration=0.6, arrival="uniform"))
    assert B in report.draining_observed
    assert report.draining_hit_count == 0 and report.draining_hits == []


def test_hits_when_the_gateway_keeps_routing_to_a_draining_worker() -> None:
    report = asyncio.run(load(FakeGateway(drain_after=10, obey=False), rate=100, duration=0.6, arrival="uniform"))
    assert report.draining_hit_count > 0
    assert all(h.worker == B and h.sent_at > h.marked_at for h in report.draining_hits)
    assert report.draining_gateway_counts.get(B, 0) > 0


def test_caller_supplied_draining_urls_count_too() -> None:
    gw = FakeGateway()

    async def go() -> Any:
        async with serve(gw) as url:
            return await run_load(LoadSpec(url=url, rate=50, duration=0.4, arrival="uniform", draining=lambda: [B], poll_interval_s=0.02))

    report = asyncio.run(go())
    assert report.draining_observed.keys() == {B}
    assert report.draining_hit_count == report.routed[B] > 0


def test_traffic_to_a_worker_re_added_after_its_drain_is_not_a_hit() -> None:
    report = asyncio.run(load(FakeGateway(drain_after=10, readd_after=30, obey=True), rate=100, duration=0.8, arrival="uniform"))
    windows = [w for w in report.draining_windows if w["worker"] == B]
    assert len(windows) == 1 and windows[0]["closed"]
    assert report.routed[B] > 5  # before the drain and after the re-add
    assert report.draining_hit_count == 0
