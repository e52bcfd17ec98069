"""PD semantics in-process: bootstrap rules, the prefill/decode rendezvous, and KV bytes through a real mooncake_master."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferplane.emulator.config import EngineConfig
from inferplane.emulator.server import Emulator
from tests.emulator_support import MooncakeMaster, Running, free_port, make_config, mooncake_master, running

PROMPT = {"text": "Explain prefill and decode disaggregation in one sentence.", "sampling_params": {"max_new_tokens": 12, "temperature": 0}}


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MooncakeMaster]:
    with mooncake_master(tmp_path_factory.mktemp("mooncake")) as m:
        yield m


def counter(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return sum(s.value for s in family.samples if s.name == name + "_total" or s.name == name + "_count")
    return 0.0


@dataclass
class Pair:
    prefill: Running
    decode: Running
    unified: Running

    def body(self, room: int, **extra: Any) -> dict[str, Any]:
        cfg = self.prefill.emulator.cfg
        return PROMPT | {"bootstrap_host": "127.0.0.1", "bootstrap_port": cfg.bootstrap_port, "bootstrap_room": room} | extra


@contextlib.asynccontextmanager
async def pd(
    master: MooncakeMaster | None, prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None
) -> AsyncIterator[Pair]:
    kv: dict[str, Any] = {"mooncake_master": master.rpc_address, "mooncake_metadata": master.metadata_url} if master else {}
    configs: list[EngineConfig] = [
        make_config("prefill", **(kv | (prefill or {}))),
        make_config("decode", **(kv | (decode or {}))),
        make_config("unified"),
    ]
    emulators = [Emulator(c, exit_process=lambda code: None) for c in configs]
    await asyncio.gather(*(e.start() for e in emulators))
    try:
        async with aiohttp.ClientSession() as session:
            p, d, u = (Running(e, session, f"http://127.0.0.1:{e.cfg.port}", []) for e in emulators)
            for side in (p, d):
                store = side.emulator.engine.store
                for _ in range(100):
                    if store is None or store.status == "ready":
                        break
                    await asyncio.sleep(0.05)
            yield Pair(p, d, u)
    finally:
        # Together: a store client takes ~2 s to unmount.
        await asyncio.gather(*(e.stop() for e in emulators))


def test_requests_without_bootstrap_room_are_refused_as_sglang_does() -> None:
    async def main() -> None:
        async with pd(None) as pair:
            for side in (pair.prefill, pair.decode):
                status, err = await side.post("/generate", PROMPT | {"rid": "no-room"})
                assert status == 400
                assert err == {
                    "error": {"message": "Invalid request: Disaggregated request received without bootstrap room id. req.rid='no-room'"}
                }
                status, frames = await side.stream("/generate", PROMPT | {"stream": True, "rid": "no-room-s"})
                abort = json.loads(frames[0])["meta_info"]["finish_reason"]
                assert status == 200 and frames[-1] == "[DONE]" and abort["type"] == "abort" and abort["status_code"] == 400
                status, err = await side.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
                assert status == 400 and "without bootstrap room id" in err["message"]
                # Health probes carry the fake bootstrap host and need no partner.
                assert (await side.get("/health"))[0] == 200
                assert (await side.get("/server_info"))[1]["disaggregation_mode"] in ("prefill", "decode")

    asyncio.run(main())


def test_decode_finishes_only_after_its_prefill_and_equals_unified(master: MooncakeMaster) -> None:
    async def main() -> None:
        async with pd(master) as pair:
            puts = master.metric("master_put_start_requests_total")
            decode = asyncio.create_task(pair.decode.post("/generate", pair.body(4242)))
            await asyncio.sleep(0.3)
            assert not decode.done()
            assert pair.decode.emulator.engine.snapshot()["decode_transfer"] == 1
            assert pair.prefill.emulator.engine.snapshot()["prefill_bootstrap"] == 0
            p_status, p_out = await pair.prefill.post("/generate", pair.body(4242))
            d_status, d_out = await decode
            _, u_out = await pair.unified.post("/generate", PROMPT)
            assert p_status == d_status == 200
            assert p_out["meta_info"]["finish_reason"] == {"type": "length", "length": 1}
            assert p_out["output_ids"] == u_out["output_ids"][:1]
            assert d_out["output_ids"] == u_out["output_ids"] and d_out["text"] == u_out["text"]
            assert d_out["meta_info"]["prompt_tokens"] == u_out["meta_info"]["prompt_tokens"]
            assert master.metric("master_put_start_requests_total") > puts
            p_metrics = (await pair.prefill.get("/metrics"))[1]
            assert counter(p_metrics, "sglang:kv_transfer_latency_ms") == 1
            assert counter(p_metrics, "sglang:kv_transfer_total_mb") == 1
            d_metrics = (await pair.decode.get("/metrics"))[1]
            assert counter(d_metrics, "sglang:kv_transfer_bootstrap_ms") == 1
            assert (await pair.decode.get("/server_info"))[1]["emulator"]["kv_store"]["gets"] == 1
            loads = (await pair.prefill.get("/v1/loads"))[1]["loads"][0]["disaggregation"]
            assert loads["mode"] == "prefill" and loads["kv_transfer_latency_ms"] > 0

            # Streaming through PD: both sides stream, the decode's frames are cumulative.
            prefill = asyncio.create_task(pair.prefill.stream("/generate", pair.body(4343, stream=True)))
            status, frames = await pair.decode.stream("/generate", pair.body(4343, stream=True))
            await prefill
            assert status == 200 and frames[-1] == "[DONE]"
            assert json.loads(frames[-2])["output_ids"] == u_out["output_ids"]

    asyncio.run(main())


def test_prefill_on_wrong_weights_poisons_the_decode_output(master: MooncakeMaster) -> None:
    async def main() -> None:
        async with pd(master) as pair:
            await pair.prefill.post("/emulator/faults", {"wrong_revision": "0" * 40})
            decode = asyncio.create_task(pair.decode.post("/generate", pair.body(77)))
            await pair.prefill.post("/generate", pair.body(77))
            status, out = await decode
            _, expected = await pair.unified.post("/generate", PROMPT)
            assert status == 200 and out["output_ids"] != expected["output_ids"]

    asyncio.run(main())


def test_kv_transfer_fault_fails_both_sides_and_counts(master: MooncakeMaster) -> None:
    async def main() -> None:
        async with pd(master) as pair:
            await pair.prefill.post("/emulator/faults", {"kv_transfer_fail": True})
            decode = asyncio.create_task(pair.decode.post("/generate", pair.body(99)))
            p_status, p_err = await pair.prefill.post("/generate", pair.body(99))
            d_status, d_err = await decode
            assert p_status == 500 and p_err["message"].startswith("Failed to send KV for request rank=0")
            assert d_status == 500 and d_err["message"].startswith("Decode transfer failed for request rank=0")
            assert "bootstrap_room=99" in d_err["message"]
            assert counter((await pair.prefill.get("/metrics"))[1], "sglang:num_transfer_failed_reqs") == 1
            assert counter((await pair.decode.get("/metrics"))[1], "sglang:num_transfer_failed_reqs") == 1
            # On the decode side the fault fails the transfer even though the prefill sent it.
            await pair.prefill.post("/emulator/faults", {"kv_transfer_fail": False})
            await pair.decode.post("/emulator/faults", {"kv_transfer_fail": True})
            decode = asyncio.create_task(pair.decode.post("/generate", pair.body(100)))
            assert (await pair.prefill.post("/generate", pair.body(100)))[0] == 200
            assert (await decode)[0] == 500
            assert counter((await pair.decode.get("/metrics"))[1], "sglang:num_transfer_failed_reqs") == 2

    asyncio.run(main())


def test_bootstrap_failures_count_on_both_roles(master: MooncakeMaster) -> None:
    async def main() -> None:
        async with pd(master, prefill={"bootstrap_timeout_s": 0.3}) as pair:
            # A decode whose prefill does not answer on the bootstrap port.
            body = pair.body(5) | {"bootstrap_port": free_port()}
            status, err = await pair.decode.post("/generate", body)
            assert status == 500 and err["message"].startswith("Decode handshake failed for request rank=0")
            assert counter((await pair.decode.get("/metrics"))[1], "sglang:num_bootstrap_failed_reqs") == 1
            # A prefill whose decode never comes.
            status, err = await pair.prefill.post("/generate", pair.body(6))
            assert status == 500 and err["message"].startswith("Prefill bootstrap failed for request rank=0")
            assert counter((await pair.prefill.get("/metrics"))[1], "sglang:num_bootstrap_failed_reqs") == 1
            status, _ = await pair.decode.post("/generate", pair.body(5) | {"bootstrap_port": None})
            assert status == 500

    asyncio.run(main())


def test_kv_layout_mismatch_is_caught_at_handshake(master: MooncakeMaster) -> None:
    async def main() -> None:
        async with pd(master) as pair:
            engine = pair.decode.emulator.engine
            other = replace(pair.decode.emulator.cfg.model, kv_layout=engine.cfg.model.kv_layout.model_copy(update={"head_dim": 128}))
            engine.cfg = replace(engine.cfg, model=other)
            assert engine.kv_client is not None
            engine.kv_client.expect = engine.server_info_for_kv()
            status, err = await pair.decode.post("/generate", pair.body(8))
            assert status == 500 and "KV layout mismatch" in err["message"]

    asyncio.run(main())


def test_unreachable_store_is_a_broken_kv_path_not_a_crash(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        kv = {"mooncake_master": dead}
        async with running(make_config("prefill", **kv)) as p, running(make_config("decode", **kv)) as d:
            assert (await p.get("/health"))[0] == 200 and (await d.get("/health"))[0] == 200
            store = (await d.get("/server_info"))[1]["emulator"]["kv_store"]
            assert store["status"] in ("connecting", "unreachable") and store["master"] == dead
            body = PROMPT | {"bootstrap_host": "127.0.0.1", "bootstrap_port": p.emulator.cfg.bootstrap_port, "bootstrap_room": 1}
            decode = asyncio.create_task(d.post("/generate", body))
            p_status, p_err = await p.post("/generate", body)
            d_status, d_err = await decode
            assert p_status == 500 and "mooncake store" in p_err["message"]
            assert d_status == 500 and "Decode transfer failed" in d_err["message"]
            assert counter((await p.get("/metrics"))[1], "sglang:num_transfer_failed_reqs") == 1

    asyncio.run(main())
