"""The emulator's HTTP surface, in-process over real sockets: shapes as runtime-interfaces.md documents them."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferplane.emulator import metrics as emu_metrics
from tests.emulator_support import Running, make_config, running

GEN = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}}


def run(cfg_overrides: dict[str, Any], body: Callable[[Running], Awaitable[None]], role: str = "unified") -> None:
    async def main() -> None:
        async with running(make_config(role, **cfg_overrides)) as r:  # type: ignore[arg-type]
            await body(r)

    asyncio.run(main())


def test_info_routes_have_sglang_shapes() -> None:
    async def body(r: Running) -> None:
        assert (await r.get("/health"))[0] == 200
        assert (await r.get("/health_generate"))[0] == 200
        assert (await r.get("/ready"))[0] == 200
        status, models = await r.get("/v1/models")
        assert status == 200 and models["object"] == "list"
        card = models["data"][0]
        assert card | {"created": 0} == {
            "id": "emu-tiny",
            "object": "model",
            "created": 0,
            "owned_by": "sglang",
            "root": "emu-tiny",
            "parent": None,
            "max_model_len": 32768,
        }
        _, info = await r.get("/model_info")
        assert info == (await r.get("/get_model_info"))[1]
        assert info["model_path"] == "/models/emu-tiny" and info["served_model_name"] == "emu-tiny"
        assert info["disaggregation_mode"] == "null" and info["weight_version"] == "default" and info["is_generation"] is True
        _, server = await r.get("/server_info")
        assert server["version"] == "0.5.23" and server["frontend"] == "python"
        assert server["revision"] == "3f1c2a9e5b7d4c6a8e0f1b2d3c4e5f6a7b8c9d0e"
        assert server["emulator"]["config_sha256"] == "6973e54f79f87926009e6964ea50400461ec363e3903aaa935c4759fa1e21a13"
        assert server["emulator"]["weights_manifest_sha256"].startswith("5645004f")
        assert isinstance(server["internal_states"], list) and "last_gen_throughput" in server["internal_states"][0]
        assert server["max_running_requests"] == 256 and server["disaggregation_mode"] == "null"
        assert (await r.get("/get_server_info"))[1]["model_path"] == server["model_path"]
        status, missing = await r.get("/loads?model=emu-tiny")  # SMG's own probe: 404 from SGLang
        assert status == 404 and missing == {"detail": "Not Found"}
        assert (await r.get("/get_load"))[0] == 404  # removed by 0.5.23

    run({}, body)


def test_engine_version_changes_reported_version_not_output() -> None:
    outputs: list[list[int]] = []

    async def body(r: Running) -> None:
        _, out = await r.post("/generate", GEN)
        outputs.append(out["output_ids"])

    run({"engine_version": "0.5.23"}, body)
    run({"engine_version": "0.5.24"}, body)
    assert outputs[0] == outputs[1]

    async def old(r: Running) -> None:
        assert (await r.get("/server_info"))[1]["version"] == "0.5.8"
        assert (await r.get("/ready"))[0] == 404
        status, load = await r.get("/get_load")
        assert status == 200 and set(load[0]) == {
            "rid",
            "http_worker_ipc",
            "dp_rank",
            "num_reqs",
            "num_waiting_reqs",
            "num_tokens",
            "ts_tic",
        }
        _, loads = await r.get("/v1/loads")
        assert loads["dp_rank_count"] == 1 and set(loads["aggregate"]) >= {"total_running_reqs", "avg_token_usage"}

    run({"engine_version": "0.5.8"}, old)


def test_v1_loads_has_the_0_5_23_shape_smg_polls() -> None:
    async def body(r: Running) -> None:
        status, loads = await r.get("/v1/loads?include=core,disagg,queues,memory")
        assert status == 200
        assert set(loads) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
        assert loads["version"] == "0.5.23" and loads["accelerator"] == "NVIDIA H200"
        load = loads["loads"][0]
        for key in (
            "num_running_reqs",
            "num_waiting_reqs",
            "num_used_tokens",
            "max_total_num_tokens",
            "max_running_requests",
            "token_usage",
        ):
            assert key in load
        assert load["disaggregation"]["mode"] == "null" and "kv_transfer_speed_gb_s" in load["disaggregation"]
        assert set(load["queues"]) == {"waiting", "grammar", "paused", "retracted", "prealloc_ready"}
        core = (await r.get("/v1/loads?include=core"))[1]["loads"][0]
        assert "disaggregation" not in core and "memory" not in core
        status, bad = await r.get("/v1/loads?include=nope")
        assert status == 400 and "Invalid include sections" in bad["message"]
        status, text = await r.get("/v1/loads?format=prometheus")
        assert status == 200 and '# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank="0"} 0' in text
        assert 'sglang_disagg_kv_transfer_latency_ms{dp_rank="0"}' in text

    run({}, body)


def test_generate_non_stream_shape_and_determinism() -> None:
    async def body(r: Running) -> None:
        status, out = await r.post("/generate", GEN)
        assert status == 200
        assert list(out) == ["text", "output_ids", "meta_info"]
        meta = out["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": 6}
        assert meta["prompt_tokens"] == 5 and meta["completion_tokens"] == 6 and len(out["output_ids"]) == 6
        assert meta["weight_version"] == "default" and meta["e2e_latency"] > 0 and meta["cached_tokens"] == 0
        again = (await r.post("/generate", GEN | {"rid": "fixed-rid"}))[1]
        assert again["output_ids"] == out["output_ids"] and again["text"] == out["text"]
        assert again["meta_info"]["id"] == "fixed-rid"
        # The prefix cache works in 16-token blocks and always recomputes the last prompt token.
        long_prompt = {"text": " ".join(f"w{i}" for i in range(40)), "sampling_params": {"max_new_tokens": 1}}
        assert (await r.post("/generate", long_prompt))[1]["meta_info"]["cached_tokens"] == 0
        assert (await r.post("/generate", long_prompt))[1]["meta_info"]["cached_tokens"] == 32
        shorter = (await r.post("/generate", GEN | {"sampling_params": {"max_new_tokens": 3, "temperature": 0}}))[1]
        assert shorter["output_ids"] == out["output_ids"][:3]
        by_ids = (await r.post("/generate", {"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 2}}))[1]
        assert by_ids["meta_info"]["prompt_tokens"] == 3

    run({}, body)


def test_generate_stream_frames_are_cumulative_and_end_with_done() -> None:
    async def body(r: Running) -> None:
        status, frames = await r.stream("/generate", GEN | {"stream": True, "sampling_params": {"max_new_tokens": 12, "temperature": 0}})
        assert status == 200 and frames[-1] == "[DONE]"
        outs = [json.loads(f) for f in frames[:-1]]
        assert len(outs) >= 2
        for earlier, later in itertools.pairwise(outs):
            assert later["output_ids"][: len(earlier["output_ids"])] == earlier["output_ids"]
            assert later["text"].startswith(earlier["text"])
            assert earlier["meta_info"]["finish_reason"] is None
        assert outs[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
        plain = (await r.post("/generate", GEN | {"sampling_params": {"max_new_tokens": 12, "temperature": 0}}))[1]
        assert outs[-1]["output_ids"] == plain["output_ids"]

    run({}, body)


def test_generate_errors_and_stops() -> None:
    async def body(r: Running) -> None:
        status, err = await r.post("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4, "max_tokens": 4}})
        assert status == 400 and isinstance(err["error"], str) and err["error"].startswith("unknown field `max_tokens`, expected one of")
        status, err = await r.post("/generate", {"sampling_params": {"max_new_tokens": 4}})
        assert status == 400 and err == {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}
        status, err = await r.post("/generate", {"text": "x", "sampling_params": {"temperature": -1}})
        assert status == 400 and "temperature must be a non-negative" in err["error"]["message"]
        # A stream has already answered 200 when the tokenizer manager's check fails.
        status, frames = await r.stream("/generate", {"text": "x", "stream": True, "sampling_params": {"top_p": 2}})
        assert status == 200 and frames[-1] == "[DONE]"
        assert json.loads(frames[0])["error"] | {"message": ""} == {
            "message": "",
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
        full = (await r.post("/generate", GEN | {"sampling_params": {"max_new_tokens": 8, "temperature": 0}}))[1]
        stop_token = full["output_ids"][3]
        out = (
            await r.post("/generate", GEN | {"sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop_token_ids": [stop_token]}})
        )[1]
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_token} and out["output_ids"] == full["output_ids"][:4]
        word = full["text"].split()[2]
        out = (await r.post("/generate", GEN | {"sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop": [word]}}))[1]
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": word} and word not in out["text"]

    run({}, body)


def test_batch_generate_returns_a_list_in_order() -> None:
    async def body(r: Running) -> None:
        batch = {"text": ["first prompt", "second prompt here"], "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
        status, outs = await r.post("/generate", batch)
        assert status == 200 and isinstance(outs, list) and len(outs) == 2
        assert [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 3]
        single = (await r.post("/generate", {"text": "second prompt here", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}))[1]
        assert outs[1]["output_ids"] == single["output_ids"]
        _, frames = await r.stream("/generate", batch | {"stream": True})
        finals = {json.loads(f)["index"]: json.loads(f) for f in frames[:-1]}
        assert finals[1]["output_ids"] == single["output_ids"]

    run({}, body)


def test_openai_chat_and_completions() -> None:
    async def body(r: Running) -> None:
        chat = {"model": "emu-tiny", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "temperature": 0}
        status, out = await r.post("/v1/chat/completions", chat)
        assert status == 200 and out["object"] == "chat.completion" and out["model"] == "emu-tiny"
        choice = out["choices"][0]
        assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length" and choice["matched_stop"] is None
        usage = out["usage"]
        assert usage["completion_tokens"] == 5 and usage["total_tokens"] == usage["prompt_tokens"] + 5
        status, frames = await r.stream("/v1/chat/completions", chat | {"stream": True, "stream_options": {"include_usage": True}})
        chunks = [json.loads(f) for f in frames[:-1]]
        assert frames[-1] == "[DONE]" and all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]) == choice["message"]["content"]
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
        status, comp = await r.post("/v1/completions", {"model": "emu-tiny", "prompt": "Once upon", "temperature": 0})
        assert status == 200 and comp["object"] == "text_completion" and comp["usage"]["completion_tokens"] == 16
        status, err = await r.post("/v1/chat/completions", {"model": "m"})
        assert status == 400 and err["object"] == "error" and err["code"] == 400
        async with r.session.post(r.url + "/v1/chat/completions", data="{}", headers={"Content-Type": "text/plain"}) as resp:
            assert resp.status == 400 and "Unsupported Media Type" in (await resp.json())["message"]

    run({}, body)


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_exposition_has_sglang_names_types_labels_and_buckets() -> None:
    async def body(r: Running) -> None:
        await r.post("/generate", GEN)
        await r.stream("/generate", GEN | {"stream": True})
        status, text = await r.get("/metrics")
        assert status == 200
        assert "_created" not in text
        assert "# TYPE sglang:num_requests_total counter" in text and "# TYPE sglang:prompt_tokens_total counter" in text
        fam = _families(text)
        for name, kind in {
            "sglang:num_running_reqs": "gauge",
            "sglang:num_queue_reqs": "gauge",
            "sglang:token_usage": "gauge",
            "sglang:gen_throughput": "gauge",
            "sglang:num_requests": "counter",
            "sglang:prompt_tokens": "counter",
            "sglang:generation_tokens": "counter",
            "sglang:time_to_first_token_seconds": "histogram",
            "sglang:inter_token_latency_seconds": "histogram",
            "sglang:request_time_per_output_token_seconds": "histogram",
            "sglang:e2e_request_latency_seconds": "histogram",
            "sglang:queue_time_seconds": "histogram",
            "sglang:num_prefill_bootstrap_queue_reqs": "gauge",
        }.items():
            assert fam[name].type == kind, name
        gauge = fam["sglang:num_running_reqs"].samples[0]
        assert gauge.labels == {"model_name": "emu-tiny", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        ttft = fam["sglang:time_to_first_token_seconds"]
        streaming = {s.labels["is_streaming"] for s in ttft.samples}
        assert streaming == {"true", "false"}
        les = [float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket") and s.labels["is_streaming"] == "true"]
        assert les == [*emu_metrics.TTFT_BUCKETS, float("inf")]
        assert len(emu_metrics.ITL_BUCKETS) == 23 and emu_metrics.E2E_BUCKETS[-1] == 2400
        requests = {s.labels["is_streaming"]: s.value for s in fam["sglang:num_requests"].samples}
        assert requests == {"false": 1.0, "true": 1.0}
        # Failure counters appear with their first event, as with SGLang's multiprocess collector.
        assert "sglang:num_transfer_failed_reqs" not in fam
        line = next(ln for ln in text.splitlines() if ln.startswith("sglang:time_to_first_token_seconds_bucket"))
        assert line.index("engine_type") < line.index("is_streaming") < line.index("model_name") < line.index("le=")

    run({}, body)


def test_metrics_engine_type_per_role_and_0_5_8_variants() -> None:
    async def body(r: Running) -> None:
        fam = _families((await r.get("/metrics"))[1])
        assert fam["sglang:token_usage"].samples[0].labels["engine_type"] == "prefill"
        assert fam["sglang:kv_transfer_speed_gb_s"].type == "gauge"
        assert "sglang:num_prefill_prealloc_queue_reqs" in fam and "sglang:num_prefill_bootstrap_queue_reqs" not in fam

    run({"engine_version": "0.5.8"}, body, role="prefill")


def test_fault_api() -> None:
    async def body(r: Running) -> None:
        status, faults = await r.get("/emulator/faults")
        assert status == 200 and faults == {
            "unhealthy": False,
            "slow_ms": 0,
            "crash": False,
            "wrong_revision": None,
            "kv_transfer_fail": False,
            "error_body": False,
        }
        status, err = await r.post("/emulator/faults", {"unhealthy": "yes", "explode": True})
        assert status == 400 and "explode: unknown fault" in err["error"] and "unhealthy: expected true or false" in err["error"]
        assert (await r.post("/emulator/faults", {"unhealthy": True}))[0] == 200
        assert (await r.get("/health"))[0] == 503 and (await r.get("/ready"))[0] == 503
        baseline = (await r.post("/generate", GEN))[1]
        assert (await r.post("/emulator/faults", {"unhealthy": False, "wrong_revision": "feedface" * 5}))[0] == 200
        assert (await r.get("/health"))[0] == 200
        assert (await r.get("/server_info"))[1]["revision"] == "feedface" * 5
        assert (await r.post("/generate", GEN))[1]["output_ids"] != baseline["output_ids"]
        await r.post("/emulator/faults", {"error_body": True})
        status, out = await r.post("/generate", GEN)
        assert status == 200 and "error" in out and "output_ids" not in out
        status, out = await r.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        assert status == 200 and out["object"] == "error"
        async with r.session.delete(r.url + "/emulator/faults") as resp:
            assert resp.status == 200
        assert (await r.post("/generate", GEN))[1]["output_ids"] == baseline["output_ids"]
        await r.post("/emulator/faults", {"slow_ms": 150})
        t0 = asyncio.get_running_loop().time()
        await r.get("/health")
        assert asyncio.get_running_loop().time() - t0 >= 0.15
        await r.post("/emulator/faults", {"slow_ms": 0, "crash": True})
        await asyncio.sleep(0.2)
        assert r.exits == [1]

    run({}, body)


def test_queueing_under_max_running_requests_and_abort() -> None:
    async def body(r: Running) -> None:
        long = {"text": "long", "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}}
        first = asyncio.create_task(r.post("/generate", long | {"rid": "a"}))
        second = asyncio.create_task(r.post("/generate", long | {"rid": "b"}))
        for _ in range(200):
            snap = r.emulator.engine.snapshot()
            if snap["num_running_reqs"] == 1 and snap["num_queue_reqs"] == 1:
                break
            await asyncio.sleep(0.01)
        fam = _families((await r.get("/metrics"))[1])
        assert fam["sglang:num_running_reqs"].samples[0].value == 1 and fam["sglang:num_queue_reqs"].samples[0].value == 1
        loads = (await r.get("/v1/loads"))[1]["loads"][0]
        assert loads["num_running_reqs"] == 1 and loads["num_waiting_reqs"] == 1
        status, _ = await r.post("/flush_cache")
        assert status == 400  # SGLang refuses while requests run
        assert (await r.post("/abort_request", {"rid": "b"}))[0] == 200
        status, out = await second
        assert status == 200 and out["meta_info"]["finish_reason"]["type"] == "abort"
        assert out["meta_info"]["finish_reason"]["message"] == "Abort in waiting queue"
        await r.post("/abort_request", {"abort_all": True})
        status, out = await first
        assert out["meta_info"]["finish_reason"]["type"] == "abort" and 0 < out["meta_info"]["completion_tokens"] < 400
        assert (await r.post("/flush_cache"))[0] == 200
        fam = _families((await r.get("/metrics"))[1])
        assert fam["sglang:num_aborted_requests"].samples[0].value == 2

    run({"max_running_requests": 1}, body)


def test_pause_in_place_holds_requests_until_continue() -> None:
    async def body(r: Running) -> None:
        assert (await r.post("/pause_generation", {"mode": "in_place"}))[1] == {
            "message": "Generation paused successfully.",
            "status": "ok",
        }
        task = asyncio.create_task(r.post("/generate", GEN))
        await asyncio.sleep(0.2)
        assert not task.done() and r.emulator.engine.snapshot()["num_queue_reqs"] == 1
        assert (await r.post("/continue_generation", {}))[1] == {"message": "Generation continued successfully.", "status": "ok"}
        status, out = await task
        assert status == 200 and out["meta_info"]["finish_reason"]["type"] == "length"
        assert (await r.post("/pause_generation", {"mode": "sideways"}))[0] == 400

    run({}, body)


def test_modelled_ttft_grows_with_prompt_length() -> None:
    async def body(r: Running) -> None:
        engine = r.emulator.engine
        modelled = {}
        for words in (10, 1000, 5000):
            rid = f"len-{words}"
            await r.post(
                "/generate", {"rid": rid, "text": " ".join(f"x{words}w{i}" for i in range(words)), "sampling_params": {"max_new_tokens": 1}}
            )
            modelled[words] = next(q.modelled_prefill_s for q in engine.recent if q.rid == rid)
        assert modelled[10] < modelled[1000] < modelled[5000]
        assert modelled[5000] == pytest.approx(engine.cfg.latency.prefill_s(5000))
        fam = _families((await r.get("/metrics"))[1])
        assert sum(s.value for s in fam["sglang:prompt_tokens"].samples) == 10 + 1000 + 5000

    run({}, body)


def test_sigterm_drain_finishes_in_flight_then_stops() -> None:
    async def body(r: Running) -> None:
        req = asyncio.create_task(r.post("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}))
        await asyncio.sleep(0.05)
        r.emulator.begin_graceful_exit()
        assert (await r.get("/health"))[0] == 503 and (await r.get("/ready"))[0] == 503
        # New requests are still served while draining.
        assert (await r.post("/generate", GEN))[0] == 200
        status, out = await req
        assert status == 200 and out["meta_info"]["completion_tokens"] == 60
        await asyncio.wait_for(r.emulator.stopped.wait(), 5)
        with pytest.raises(aiohttp.ClientConnectionError):
            await r.get("/health")

    run({}, body)


def test_encoder_role_routes() -> None:
    async def body(r: Running) -> None:
        assert (await r.get("/health"))[0] == 200
        assert (await r.get("/v1/models"))[0] == 404
        status, err = await r.post("/encode", {"req_id": "r1", "modality": "smell", "mm_items": ["x"], "num_parts": 1, "part_idx": 0})
        assert status == 400 and err == {"status": "error", "message": "unsupported modality: smell", "req_id": "r1"}
        status, out = await r.post("/encode", {"req_id": "r1", "modality": "image", "mm_items": ["img"], "num_parts": 1, "part_idx": 0})
        assert status == 200 and out["req_id"] == "r1" and out["embedding_len"] == 256
        assert (await r.post("/scheduler_receive_url", {"req_id": "r1", "receive_url": "x", "receive_count": 1}))[0] == 200
        fam = _families((await r.get("/metrics"))[1])
        samples = fam["sglang:encoder_requests"].samples
        assert [(s.labels["status"], s.labels["modality"], s.value) for s in samples] == [("success", "image", 1.0)]

    run({}, body, role="encoder")


def test_language_side_calls_its_encoders() -> None:
    async def main() -> None:
        async with running(make_config("encoder")) as enc:
            cfg = make_config("unified", encoder_urls=(enc.url,))
            async with running(cfg) as lang:
                body = {"text": "describe", "image_data": "http://img/1.png", "sampling_params": {"max_new_tokens": 2}}
                status, out = await lang.post("/generate", body)
                assert status == 200 and out["meta_info"]["prompt_tokens"] == 1 + 256
                fam = _families((await enc.get("/metrics"))[1])
                assert fam["sglang:encoder_requests"].samples[0].value == 1
                await enc.post("/emulator/faults", {"unhealthy": True})
                status, err = await lang.post("/generate", body)
                assert status == 500 and "Encoder" in err["message"]

    asyncio.run(main())
