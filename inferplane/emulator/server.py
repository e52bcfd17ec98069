"""The emulator's HTTP servers: SGLang's routes on the main port, the bootstrap server on a prefill.

Route behaviour follows SGLang 0.5.23's ``srt/entrypoints/http_server.py`` (0.5.8 where
``--engine-version`` says so: ``/get_load`` instead of ``/ready``, older ``/v1/loads``), the encoder
role follows ``srt/disaggregation/encoder/http_server.py``. ``/emulator/faults`` is ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from inferplane.emulator import protocol, tokenizer
from inferplane.emulator.config import EngineConfig
from inferplane.emulator.engine import FAKE_BOOTSTRAP_HOST, Bootstrap, Engine, Request
from inferplane.emulator.faults import Faults
from inferplane.emulator.kv import bootstrap_app
from inferplane.emulator.metrics import EngineMetrics
from inferplane.emulator.model import Sampling
from inferplane.emulator.protocol import ContractError, Limits, RequestError

log = logging.getLogger("inferplane.emulator")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
WEIGHT_VERSION = "default"
FAULT_MESSAGE = "Emulated fault error_body: the engine answered 200 with an error"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


class Emulator:
    """One emulated engine: build it, ``await start()``, ``await stop()``; or ``run()`` as a process."""

    def __init__(self, cfg: EngineConfig, exit_process: Callable[[int], None] = os._exit) -> None:
        self.cfg = cfg
        self.faults = Faults()
        self.metrics = EngineMetrics(cfg)
        self.engine = Engine(cfg, self.faults, self.metrics)
        self.limits = Limits(cfg.context_length)
        self.exit_process = exit_process
        self.startup_time = time.time()
        self.app = self._build_app()
        self.bootstrap = bootstrap_app(self.engine.rooms, self.engine.server_info_for_kv()) if cfg.role == "prefill" else None
        self._runners: list[web.AppRunner] = []
        self.stopped = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.engine.start()
        targets: list[tuple[web.Application, int]] = [(self.app, self.cfg.port)]
        if self.bootstrap is not None and self.cfg.bootstrap_port is not None:
            targets.append((self.bootstrap, self.cfg.bootstrap_port))
        for app, port in targets:
            # Cancelling the handler when the client goes away is how SGLang aborts such requests.
            runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, self.cfg.host, port).start()
            self._runners.append(runner)

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        await self.engine.close()
        self.stopped.set()

    def begin_graceful_exit(self) -> None:
        """SIGTERM: /health and /ready turn 503, requests are still served, exit when none remain."""
        if self.engine.gracefully_exit:
            return
        self.engine.gracefully_exit = True
        log.info("SIGTERM received: draining %d request(s)", len(self.engine.requests))
        asyncio.get_running_loop().create_task(self._sigterm_watchdog())

    async def _sigterm_watchdog(self) -> None:
        # SGLang's watchdog notices the signal on its next poll, so /health is 503 for a while first.
        await asyncio.sleep(self.cfg.drain_poll_s)
        while True:
            if self.faults.unhealthy or os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true"):
                log.error("SIGTERM while unhealthy or with SGL_FORCE_SHUTDOWN: exiting at once")
                break
            remaining = len(self.engine.requests)
            log.info("Gracefully exiting... Remaining number of requests %d.", remaining)
            if remaining == 0:
                break
            await asyncio.sleep(self.cfg.drain_poll_s)
        await self.stop()

    # -- routing -------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._http_metrics_middleware], client_max_size=64 << 20)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/metrics", self.metrics_route)
        r.add_route("*", "/emulator/faults", self.faults_route)
        if self.cfg.role == "encoder":
            r.add_post("/encode", self.encode)
            r.add_post("/send", self.send)
            r.add_post("/scheduler_receive_url", self.scheduler_receive_url)
            return app
        if self.cfg.at_least_0_5_23:
            r.add_get("/ready", self.ready)
        else:
            r.add_get("/get_load", self.get_load)
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/v1/models", self.v1_models)
        r.add_get("/v1/loads", self.v1_loads)
        r.add_post("/generate", self.generate)
        r.add_put("/generate", self.generate)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_post("/v1/completions", self.completions)
        r.add_get("/flush_cache", self.flush_cache)
        r.add_post("/flush_cache", self.flush_cache)
        r.add_post("/abort_request", self.abort_request)
        r.add_post("/pause_generation", self.pause_generation)
        r.add_post("/continue_generation", self.continue_generation)
        return app

    @web.middleware
    async def _http_metrics_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        info = request.match_info
        endpoint = info.route.resource.canonical if info.route.resource is not None else request.path
        m = self.metrics
        m.http_requests.labels(endpoint=endpoint, method=request.method).inc()
        active = m.http_active.labels(endpoint=endpoint, method=request.method)
        active.inc()
        status = 500
        try:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                # FastAPI's answers for unknown routes and methods.
                status = exc.status
                if exc.status in (404, 405):
                    return _json({"detail": "Not Found" if exc.status == 404 else "Method Not Allowed"}, exc.status)
                raise
            status = response.status
            return response
        finally:
            active.dec()
            m.http_responses.labels(endpoint=endpoint, status_code=str(status), method=request.method).inc()

    # -- health -------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self.engine.gracefully_exit or self.faults.unhealthy:
            return web.Response(status=503)
        if self.faults.slow_ms:
            await asyncio.sleep(self.faults.slow_ms / 1000.0)
        if self.cfg.role == "encoder":
            return web.Response(status=200)
        return web.Response(status=200 if await self._health_probe() else 503)

    async def _health_probe(self) -> bool:
        """SGLang's probe: a 1-token request; healthy if the scheduler produced any output meanwhile."""
        tic = time.monotonic()
        probe = Request(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
            prompt_ids=[0],
            sampling=Sampling(max_new_tokens=1, temperature=0.0),
            bootstrap=Bootstrap(FAKE_BOOTSTRAP_HOST, None, 0) if self.cfg.is_pd else None,
            log_metrics=False,
        )
        steps = self.engine.generate(probe)
        next_step = asyncio.ensure_future(anext(steps))
        try:
            deadline = tic + self.cfg.health_check_timeout_s
            while time.monotonic() < deadline:
                if next_step.done() or self.engine.last_receive > tic:
                    return True
                await asyncio.sleep(0.01)
            return False
        finally:
            next_step.cancel()
            with contextlib.suppress(BaseException):
                await next_step
            await steps.aclose()

    async def ready(self, request: web.Request) -> web.Response:
        ok = not self.engine.gracefully_exit and not self.faults.unhealthy
        return web.Response(status=200 if ok else 503)

    # -- info ----------------------------------------------------------------------------------

    @property
    def revision(self) -> str:
        return self.engine.revision

    async def model_info(self, request: web.Request) -> web.Response:
        m = self.cfg.model
        return _json(
            {
                "model_path": m.path,
                "served_model_name": m.served_model_name,
                "tokenizer_path": m.path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": WEIGHT_VERSION,
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": self.cfg.disaggregation_mode,
                "has_image_understanding": m.has_image_understanding,
                "has_audio_understanding": False,
                "model_type": "qwen2_5_vl" if m.has_image_understanding else "qwen3",
                "architectures": ["Qwen2_5_VLForConditionalGeneration" if m.has_image_understanding else "Qwen3ForCausalLM"],
            }
        )

    def server_info_dict(self) -> dict[str, Any]:
        cfg, m = self.cfg, self.cfg.model
        snap = self.engine.snapshot()
        launch = ["sglang", "serve", "--model-path", m.path, "--served-model-name", m.served_model_name, "--port", str(cfg.port)]
        if cfg.is_pd:
            launch += ["--disaggregation-mode", cfg.role, "--disaggregation-transfer-backend", "mooncake"]
        return {
            "model_path": m.path,
            "tokenizer_path": m.path,
            "served_model_name": m.served_model_name,
            "revision": self.revision,
            "weight_version": WEIGHT_VERSION,
            "host": cfg.host,
            "port": cfg.port,
            "tp_size": 1,
            "dp_size": 1,
            "pp_size": 1,
            "ep_size": 1,
            "kv_cache_dtype": m.kv_layout.kv_cache_dtype,
            "page_size": m.kv_layout.page_size,
            "context_length": cfg.context_length,
            "max_running_requests": cfg.max_running_requests,
            "enable_metrics": True,
            "disaggregation_mode": cfg.disaggregation_mode,
            "disaggregation_transfer_backend": "mooncake",
            "disaggregation_bootstrap_port": cfg.bootstrap_port if cfg.bootstrap_port is not None else 8998,
            "disaggregation_ib_device": None,
            "encoder_only": cfg.role == "encoder",
            "language_only": bool(cfg.encoder_urls),
            "encoder_urls": list(cfg.encoder_urls),
            "launch_command": " ".join(launch),
            "status": "ready",
            "max_total_num_tokens": cfg.max_total_num_tokens,
            "max_req_input_len": cfg.context_length - 1,
            "startup_time": self.startup_time,
            "internal_states": [
                {
                    "world_size": 1,
                    "startup_time": self.startup_time,
                    "effective_max_running_requests_per_dp": cfg.max_running_requests,
                    "last_gen_throughput": snap["gen_throughput"],
                    "disaggregation_mode": cfg.disaggregation_mode,
                }
            ],
            "version": cfg.engine_version,
            "frontend": "python",
            # Not in SGLang: what the release manifest pins for this model, and the emulator's own state.
            "emulator": {
                "role": cfg.role,
                "release": cfg.release,
                "model": m.name,
                "revision": self.revision,
                "config_sha256": m.config_sha256,
                "tokenizer_sha256": m.tokenizer_sha256,
                "weights_manifest_sha256": m.weights_manifest_sha256,
                "kv_layout": {
                    "kv_cache_dtype": m.kv_layout.kv_cache_dtype,
                    "page_size": m.kv_layout.page_size,
                    "num_layers": m.kv_layout.num_layers,
                    "num_kv_heads": m.kv_layout.num_kv_heads,
                    "head_dim": m.kv_layout.head_dim,
                },
                "kv_store": self.engine.store.describe() if self.engine.store is not None else None,
                "faults": self.faults.as_dict(),
            },
        }

    async def server_info(self, request: web.Request) -> web.Response:
        return _json(self.server_info_dict())

    async def v1_models(self, request: web.Request) -> web.Response:
        name = self.cfg.model.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.cfg.context_length,
        }
        return _json({"object": "list", "data": [card]})

    def load_snapshot(self) -> dict[str, Any]:
        """One DP rank's LoadSnapshot (srt/managers/load_snapshot.py), every section present."""
        snap, cfg = self.engine.snapshot(), self.cfg
        mode = {"prefill": "prefill", "decode": "decode"}.get(cfg.role, "null")
        pending = snap["num_used_tokens"]
        return {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": snap["num_running_reqs"],
            "num_waiting_reqs": snap["num_waiting_reqs"],
            "num_waiting_uncached_tokens": 0,
            "num_used_tokens": snap["num_used_tokens"],
            "num_total_tokens": pending,
            "num_active_tokens": pending,
            "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": cfg.max_total_num_tokens,
            "max_running_requests": cfg.max_running_requests,
            "token_usage": snap["token_usage"],
            "gen_throughput": snap["gen_throughput"],
            "cache_hit_rate": snap["cache_hit_rate"],
            "utilization": snap["utilization"],
            "total_prefill_uncached_tokens": 0,
            "total_prefill_busy_us": 0,
            "decode_moments": None,
            "memory": {
                "weight_gb": round(cfg.model.size_bytes / 1e9, 3),
                "kv_cache_gb": round(cfg.max_total_num_tokens * self.engine.model.kv_bytes_per_token / 1e9, 3),
                "graph_gb": 0.0,
                "token_capacity": cfg.max_total_num_tokens,
            },
            "disaggregation": {
                "mode": mode,
                "prefill_bootstrap_queue_reqs": snap["prefill_bootstrap"],
                "prefill_inflight_queue_reqs": snap["prefill_inflight"],
                "decode_prealloc_queue_reqs": snap["decode_prealloc"],
                "decode_transfer_queue_reqs": snap["decode_transfer"],
                "decode_retracted_queue_reqs": 0,
                "kv_transfer_speed_gb_s": self.engine.last_transfer["speed_gb_s"],
                "kv_transfer_latency_ms": self.engine.last_transfer["latency_ms"],
            },
            "queues": {
                "waiting": snap["num_queue_reqs"],
                "grammar": 0,
                "paused": snap["num_paused_reqs"],
                "retracted": 0,
                "prealloc_ready": 0,
            },
        }

    async def v1_loads(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        try:
            include = [s.strip() for s in request.query["include"].split(",")] if request.query.get("include") else None
            sections = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
            if include is not None and not set(include) <= sections:
                bad = set(include) - sections
                message = f"Invalid include sections: {bad}. Valid options: {sorted(sections)}"
                return _json(protocol.http_exception_body(400, message), 400)
            dp_rank = request.query.get("dp_rank")
            load = self.load_snapshot()
            loads = [] if dp_rank not in (None, "0") else [self._filter_sections(load, include)]
            if request.query.get("format") == "prometheus":
                return web.Response(text=self._loads_prometheus(loads), content_type="text/plain", charset="utf-8")
            if self.cfg.at_least_0_5_23:
                return _json(
                    {
                        "timestamp": datetime.now(UTC).isoformat(),
                        "version": self.cfg.engine_version,
                        "accelerator": self.cfg.accelerator,
                        "num_accelerators": 1,
                        "loads": loads,
                    }
                )
            total_running = sum(x["num_running_reqs"] for x in loads)
            total_waiting = sum(x["num_waiting_reqs"] for x in loads)
            return _json(
                {
                    "timestamp": datetime.now(UTC).isoformat(),
                    "version": self.cfg.engine_version,
                    "dp_rank_count": 1,
                    "loads": loads,
                    "aggregate": {
                        "total_running_reqs": total_running,
                        "total_waiting_reqs": total_waiting,
                        "total_reqs": total_running + total_waiting,
                        "avg_token_usage": loads[0]["token_usage"] if loads else 0.0,
                        "avg_throughput": loads[0]["gen_throughput"] if loads else 0.0,
                        "avg_utilization": loads[0]["utilization"] if loads else 0.0,
                    },
                }
            )
        finally:
            self.metrics.get_loads_duration.labels(**self.metrics.tokenizer_labels).observe(time.perf_counter() - start)

    @staticmethod
    def _filter_sections(load: dict[str, Any], include: list[str] | None) -> dict[str, Any]:
        if include is None or "all" in include:
            return load
        names = {"memory": "memory", "spec": "speculative", "lora": "lora", "disagg": "disaggregation", "queues": "queues"}
        keep = {names[s] for s in include if s in names}
        sections = set(names.values())
        return {k: v for k, v in load.items() if k not in sections or k in keep}

    @staticmethod
    def _loads_prometheus(loads: list[dict[str, Any]]) -> str:
        prefixes = {"speculative": "spec", "disaggregation": "disagg"}
        samples: dict[str, list[tuple[int, float]]] = {}
        for load in loads:
            dp_rank = load["dp_rank"]
            for key, value in load.items():
                if key == "dp_rank":
                    continue
                if isinstance(value, dict):
                    for sub, sub_value in value.items():
                        if isinstance(sub_value, (int, float)) and not isinstance(sub_value, bool):
                            samples.setdefault(f"sglang_{prefixes.get(key, key)}_{sub}", []).append((dp_rank, sub_value))
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    samples.setdefault(f"sglang_{key}", []).append((dp_rank, value))
        lines: list[str] = []
        for name, values in samples.items():
            lines.append(f"# TYPE {name} gauge")
            lines.extend(f'{name}{{dp_rank="{rank}"}} {value}' for rank, value in values)
        return "\n".join(lines) + "\n"

    async def get_load(self, request: web.Request) -> web.Response:
        snap = self.engine.snapshot()
        return _json(
            [
                {
                    "rid": None,
                    "http_worker_ipc": None,
                    "dp_rank": 0,
                    "num_reqs": snap["num_running_reqs"] + snap["num_waiting_reqs"],
                    "num_waiting_reqs": snap["num_waiting_reqs"],
                    "num_tokens": snap["num_used_tokens"],
                    "ts_tic": time.perf_counter(),
                }
            ]
        )

    async def metrics_route(self, request: web.Request) -> web.Response:
        self.engine.refresh_gauges()
        return web.Response(body=self.metrics.render().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    # -- control ---------------------------------------------------------------------------------

    async def faults_route(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return _json(self.faults.as_dict())
        if request.method == "DELETE":
            self.faults.clear()
            return _json(self.faults.as_dict())
        if request.method != "POST":
            return _json({"detail": "Method Not Allowed"}, 405)
        try:
            body = await request.json()
        except ValueError:
            return _json({"error": 'body is not JSON; send e.g. {"unhealthy": true}'}, 400)
        problems = self.faults.update(body)
        if problems:
            return _json({"error": "; ".join(problems)}, 400)
        log.warning("faults now %s", self.faults.as_dict())
        if self.faults.crash:
            # Answer first so the caller knows the fault took; then die like a CUDA error would.
            asyncio.get_running_loop().call_later(0.05, self.exit_process, 1)
        return _json(self.faults.as_dict())

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.flush_cache():
            return web.Response(text=FLUSHED)
        return web.Response(text="Flush cache failed.\n", status=400)

    async def abort_request(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            return _json({"error": {"message": "body must be an AbortReq object"}}, 400)
        self.engine.abort(body.get("rid"), bool(body.get("abort_all", False)))
        return web.Response(status=200)

    async def pause_generation(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        mode = body.get("mode", "abort") if isinstance(body, dict) else "abort"
        if mode not in ("abort", "retract", "in_place"):
            return _json({"error": {"message": f"mode must be abort, retract or in_place, got {mode!r}"}}, 400)
        self.engine.pause(mode)
        return _json({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        self.engine.unpause()
        return _json({"message": "Generation continued successfully.", "status": "ok"})

    # -- generation -------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Any:
        try:
            return await request.json()
        except ValueError as exc:
            raise RequestError(f"JSON decode error: {exc}") from None

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(request)
            protocol.check_generate_contract(body)
        except ContractError as exc:
            return _json({"error": str(exc)}, 400)
        except RequestError as exc:
            return _json({"error": {"message": str(exc)}}, 400)
        stream = bool(body.get("stream"))
        if self.faults.error_body:
            if stream:
                return await self._sse(request, self._error_frames(FAULT_MESSAGE, 500))
            return _json({"error": {"message": FAULT_MESSAGE}})
        try:
            reqs, batch = protocol.generate_requests(body, self.engine.new_rid, self.limits)
        except RequestError as exc:
            if stream:
                return await self._sse(request, self._error_frames(str(exc), 400))
            return _json({"error": {"message": str(exc)}}, 400)
        if stream:
            return await self._sse(request, self._generate_frames(reqs, batch))
        finals = await self._run_all(reqs)
        for req in finals:
            status = protocol.abort_status(req)
            if status is not None:
                return _json(protocol.error_body(status, req.finish_reason["message"] if req.finish_reason else "Aborted"), status)
        outputs = [protocol.generate_output(r, WEIGHT_VERSION, index=i if batch else None) for i, r in enumerate(finals)]
        return _json(outputs if batch else outputs[0])

    async def _run_all(self, reqs: list[Request]) -> list[Request]:
        async def run(req: Request) -> Request:
            async for _ in self.engine.generate(req):
                pass
            return req

        return list(await asyncio.gather(*(run(r) for r in reqs)))

    async def _merged(self, reqs: list[Request]) -> AsyncIterator[tuple[int, Request]]:
        """Steps of several requests as they happen, tagged with their batch index."""
        if len(reqs) == 1:
            async for step in self.engine.generate(reqs[0]):
                yield 0, step
            return
        queue: asyncio.Queue[tuple[int, Request] | None] = asyncio.Queue()

        async def pump(i: int, req: Request) -> None:
            try:
                async for step in self.engine.generate(req):
                    await queue.put((i, step))
            finally:
                await queue.put(None)

        tasks = [asyncio.create_task(pump(i, r)) for i, r in enumerate(reqs)]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()

    async def _generate_frames(self, reqs: list[Request], batch: bool) -> AsyncGenerator[str, None]:
        async for i, req in self._merged(reqs):
            yield json.dumps(protocol.generate_output(req, WEIGHT_VERSION, index=i if batch else None))

    @staticmethod
    async def _error_frames(message: str, code: int) -> AsyncGenerator[str, None]:
        yield json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code, "retryable": False}})

    async def _sse(self, request: web.Request, frames: AsyncGenerator[str, None]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async for frame in frames:
                await response.write(f"data: {frame}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client left; closing the frames below aborts its requests
        finally:
            await frames.aclose()
        return response

    # -- OpenAI ------------------------------------------------------------------------------------

    async def _openai_requests(
        self, body: dict[str, Any], prompt: str | list[int], images: list[str], default_max: int | None
    ) -> list[Request]:
        params = protocol.openai_sampling(body, default_max)
        sampling = protocol.to_sampling(params, default_max)
        pids = protocol.prompt_ids(prompt if isinstance(prompt, str) else None, prompt if isinstance(prompt, list) else None, images)
        sampling = protocol.apply_context_length(sampling, len(pids), self.limits)
        n = int(body.get("n") or 1)
        rid = body.get("rid") or self.engine.new_rid()
        bootstrap = Bootstrap(body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room"))
        return [
            Request(
                rid=str(rid) if n == 1 else f"{rid}-{j}",
                prompt_ids=pids,
                sampling=sampling,
                stream=bool(body.get("stream")),
                bootstrap=bootstrap,
                images=images,
                sample_index=j if n > 1 else 0,
            )
            for j in range(n)
        ]

    def _openai_precheck(self, request: web.Request) -> web.Response | None:
        if request.content_type != "application/json":
            message = "1 validation error:\n  {'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\"}"
            return _json({"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}, 400)
        return None

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        if (bad := self._openai_precheck(request)) is not None:
            return bad
        try:
            body = protocol.check_openai_common(await self._body(request))
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise RequestError("messages: Field required: a non-empty list of {role, content} objects")
            prompt, images = tokenizer.chat_prompt(messages)
            reqs = await self._openai_requests(body, prompt, images, None)
        except RequestError as exc:
            return _json(protocol.openai_error(str(exc)), 400)
        return await self._openai_respond(request, body, reqs, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if (bad := self._openai_precheck(request)) is not None:
            return bad
        try:
            body = protocol.check_openai_common(await self._body(request))
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if not isinstance(prompt, str) and not (isinstance(prompt, list) and all(protocol._is_int(t) for t in prompt)):
                raise RequestError("prompt: expected a string, a list with one string, or a list of token ids")
            reqs = await self._openai_requests(body, prompt, [], 16)
        except RequestError as exc:
            return _json(protocol.openai_error(str(exc)), 400)
        return await self._openai_respond(request, body, reqs, chat=False)

    async def _openai_respond(self, request: web.Request, body: dict[str, Any], reqs: list[Request], chat: bool) -> web.StreamResponse:
        model = str(body.get("model") or self.cfg.model.served_model_name)
        stream = bool(body.get("stream"))
        if self.faults.error_body:
            error = protocol.openai_error(FAULT_MESSAGE, 500, "InternalServerError")
            if stream:
                return await self._sse(request, self._one_frame(json.dumps(error)))
            return _json(error)
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._sse(request, self._openai_frames(reqs, model, chat, include_usage))
        finals = await self._run_all(reqs)
        for req in finals:
            status = protocol.abort_status(req)
            if status is not None:
                message = req.finish_reason["message"] if req.finish_reason else "Aborted"
                return _json(protocol.openai_error(message) if status == 400 else protocol.error_body(status, message), status)
        created = int(time.time())
        choices = []
        for i, req in enumerate(finals):
            finish, matched = protocol.openai_finish(req)
            if chat:
                message = {"role": "assistant", "content": req.text, "reasoning_content": None}
                choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": matched})
            else:
                choices.append({"index": i, "text": req.text, "logprobs": None, "finish_reason": finish, "matched_stop": matched})
        return _json(
            {
                "id": finals[0].rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": protocol.usage(finals),
                "metadata": None,
            }
        )

    @staticmethod
    async def _one_frame(frame: str) -> AsyncGenerator[str, None]:
        yield frame

    async def _openai_frames(self, reqs: list[Request], model: str, chat: bool, include_usage: bool) -> AsyncGenerator[str, None]:
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        sent = [0] * len(reqs)
        started = [False] * len(reqs)
        rid = reqs[0].rid

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
            return json.dumps({"id": rid, "object": kind, "created": created, "model": model, "choices": choices, "usage": usage})

        async for i, req in self._merged(reqs):
            if chat and not started[i]:
                started[i] = True
                delta0 = {"role": "assistant", "content": "", "reasoning_content": None}
                yield chunk([{"index": i, "delta": delta0, "logprobs": None, "finish_reason": None, "matched_stop": None}])
            status = protocol.abort_status(req)
            if status is not None:
                message = req.finish_reason["message"] if req.finish_reason else "Aborted"
                yield json.dumps(protocol.openai_error(message, status, "BadRequestError" if status == 400 else "InternalServerError"))
                return
            new_text, sent[i] = req.text[sent[i] :], len(req.text)
            finish, matched = protocol.openai_finish(req)
            if not new_text and finish is None:
                continue
            if chat:
                choice = {"index": i, "delta": {"role": None, "content": new_text, "reasoning_content": None}}
            else:
                choice = {"index": i, "text": new_text}
            yield chunk([{**choice, "logprobs": None, "finish_reason": finish, "matched_stop": matched}])
        if include_usage:
            yield chunk([], protocol.usage(reqs))

    # -- encoder role -------------------------------------------------------------------------------

    async def encode(self, request: web.Request) -> web.Response:
        m = self.metrics
        t0 = time.perf_counter()
        try:
            body = await request.json()
        except ValueError:
            body = None
        problem = self._encode_problem(body)
        if problem:
            req_id = body.get("req_id") if isinstance(body, dict) else None
            return _json({"status": "error", "message": problem, "req_id": req_id}, 400)
        assert isinstance(body, dict)
        modality = body["modality"]
        items = body["mm_items"] if isinstance(body["mm_items"], list) else [body["mm_items"]]
        labels = {**m.encoder_labels, "modality": modality}
        m.encoder_requests_received.labels(**labels).inc()
        m.encoder_items_per_request.labels(**labels).observe(len(items))
        if self.faults.unhealthy or self.faults.error_body:
            m.encoder_requests.labels(**labels, status="error").inc()
            return _json({"status": "error", "message": "encoder unhealthy (emulated fault)", "req_id": body["req_id"]}, 500)
        probe = Request(rid=f"encode-{body['req_id']}-{uuid.uuid4().hex[:8]}", prompt_ids=[], sampling=Sampling(), log_metrics=False)
        with self.engine.stage(probe, "waiting"):
            await self.engine.admission.acquire(0)
        try:
            m.encoder_queue_wait.labels(**labels).observe(time.perf_counter() - t0)
            await asyncio.sleep(self.cfg.latency.encode_s(len(items)) + self.faults.slow_ms / 1000.0)
        finally:
            self.engine.admission.release(0)
        m.encoder_requests.labels(**labels, status="success").inc()
        m.encoder_e2e.labels(**labels).observe(time.perf_counter() - t0)
        dim = 3584
        return _json(
            {
                "req_id": body["req_id"],
                "part_idx": body["part_idx"],
                "embedding_size": dim * 2 * 256 * len(items),
                "embedding_len": 256 * len(items),
                "embedding_dim": dim,
            }
        )

    @staticmethod
    def _encode_problem(request: Any) -> str | None:
        if not isinstance(request, dict):
            return f"request is not a dict: {type(request).__name__}"
        req_id = request.get("req_id")
        if not isinstance(req_id, str) or not req_id:
            return "missing or invalid req_id"
        modality = request.get("modality")
        if not isinstance(modality, str):
            return "missing or invalid modality"
        if modality not in ("image", "video", "audio"):
            return f"unsupported modality: {modality}"
        items = request.get("mm_items")
        if items is None or (isinstance(items, (list, tuple)) and len(items) == 0):
            return "missing or empty mm_items"
        num_parts, part_idx = request.get("num_parts"), request.get("part_idx")
        if not isinstance(num_parts, int) or isinstance(num_parts, bool) or num_parts <= 0:
            return "num_parts must be a positive integer"
        if not isinstance(part_idx, int) or isinstance(part_idx, bool) or not 0 <= part_idx < num_parts:
            return f"part_idx must be in [0, {num_parts})"
        return None

    async def send(self, request: web.Request) -> web.Response:
        # Embeddings go back inline with /encode (the zmq backends); /send is Mooncake-only.
        body = await request.json()
        req_id = body.get("req_id") if isinstance(body, dict) else None
        return _json({"status": "error", "message": f"no staged embedding for req_id={req_id} (already released)", "req_id": req_id}, 500)

    async def scheduler_receive_url(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict) or "req_id" not in body or "receive_url" not in body:
            return _json({"status": "error", "message": "req_id and receive_url are required", "req_id": None}, 400)
        return _json(None)

    # -- as a process ---------------------------------------------------------------------------------

    async def serve_forever(self, announce: Callable[[str], None]) -> int:
        loop = asyncio.get_running_loop()
        await self.start()
        loop.add_signal_handler(signal.SIGTERM, self.begin_graceful_exit)
        loop.add_signal_handler(signal.SIGINT, self.begin_graceful_exit)
        announce(f"ready on http://{self.cfg.host}:{self.cfg.port}")
        await self.stopped.wait()
        return 0
