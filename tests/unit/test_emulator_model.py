"""The emulator's pure parts: tokenizer, deterministic model, latency model, request contract, scheduler."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from inferplane.emulator import protocol, tokenizer
from inferplane.emulator.engine import Admission, PrefixCache
from inferplane.emulator.latency import LatencyModel
from inferplane.emulator.model import EOS_TOKEN_ID, EmulatedModel, Sampling, parse_kv_payload
from inferplane.emulator.protocol import ContractError, Limits, RequestError
from inferplane.manifest import KvLayout

LAYOUT = KvLayout(kv_cache_dtype="auto", page_size=1, num_layers=4, num_kv_heads=2, head_dim=64)
REV_A = "3f1c2a9e5b7d4c6a8e0f1b2d3c4e5f6a7b8c9d0e"
REV_B = "0000000000000000000000000000000000000001"
GREEDY = Sampling(max_new_tokens=16, temperature=0.0)


def answer(model: EmulatedModel, prompt: str, sampling: Sampling = GREEDY, n: int = 16) -> list[int]:
    seed = model.token_seed(model.fingerprint(tokenizer.encode(prompt)), sampling)
    return [model.output_token(seed, i, sampling) for i in range(n)]


def test_tokenizer_is_deterministic_and_counts_grow_with_text() -> None:
    assert tokenizer.encode("Hello, world!") == tokenizer.encode("Hello, world!")
    assert len(tokenizer.encode("Hello, world!")) == 4
    assert len(tokenizer.encode("one two three four five six")) > len(tokenizer.encode("one two"))
    ids = tokenizer.encode("The quick brown fox")
    assert all(tokenizer.FIRST_WORD_ID <= i < tokenizer.VOCAB_SIZE for i in ids)
    assert tokenizer.decode([100, 200]) == tokenizer.word(100) + tokenizer.word(200)


def test_same_revision_same_output_other_revision_other_output() -> None:
    a1, a2, b = EmulatedModel(REV_A, LAYOUT), EmulatedModel(REV_A, LAYOUT), EmulatedModel(REV_B, LAYOUT)
    assert answer(a1, "What is PD disaggregation?") == answer(a2, "What is PD disaggregation?")
    assert answer(a1, "What is PD disaggregation?") != answer(b, "What is PD disaggregation?")
    assert answer(a1, "What is PD disaggregation?") != answer(a1, "What is EPD disaggregation?")


def test_greedy_ignores_sampling_knobs_but_sampled_output_depends_on_them() -> None:
    m = EmulatedModel(REV_A, LAYOUT)
    assert answer(m, "hi", GREEDY) == answer(m, "hi", replace(GREEDY, top_p=0.5, top_k=7, sampling_seed=3))
    hot = Sampling(max_new_tokens=16, temperature=0.8, sampling_seed=1)
    assert answer(m, "hi", hot) != answer(m, "hi", replace(hot, sampling_seed=2))
    assert answer(m, "hi", hot) != answer(m, "hi", GREEDY)


def test_shorter_answer_is_a_prefix_and_eos_ends_answers_unless_ignored() -> None:
    m = EmulatedModel(REV_A, LAYOUT)
    long = Sampling(max_new_tokens=2000, temperature=0.0)
    seed = m.token_seed(m.fingerprint(tokenizer.encode("tell me a story")), long)
    eos_at = m.natural_length(seed)
    tokens = [m.output_token(seed, i, long) for i in range(eos_at + 1)]
    assert tokens[eos_at] == EOS_TOKEN_ID and EOS_TOKEN_ID not in tokens[:eos_at]
    assert m.output_token(seed, eos_at, replace(long, ignore_eos=True)) != EOS_TOKEN_ID
    assert answer(m, "tell me a story", n=8) == answer(m, "tell me a story", n=16)[:8]


def test_kv_payload_size_follows_layout_and_cap_and_round_trips() -> None:
    m = EmulatedModel(REV_A, LAYOUT)
    assert m.kv_bytes_per_token == 2 * 4 * 2 * 64 * 2
    fp = m.fingerprint([1, 2, 3])
    small = m.kv_payload(fp, 3, cap=1 << 20)
    assert len(small) == 32 + 3 * m.kv_bytes_per_token
    assert len(m.kv_payload(fp, 100_000, cap=4096)) == 4096
    assert parse_kv_payload(small) == (fp, 3)
    with pytest.raises(ValueError, match="unknown layout"):
        parse_kv_payload(b"x" * 64)


def test_latency_model_ttft_grows_with_prompt_and_itl_with_batch() -> None:
    lm = LatencyModel(prefill_tokens_per_s=10_000, prefill_overhead_ms=2, itl_ms=5, itl_per_running_ms=0.1)
    ttfts = [lm.prefill_s(n) for n in (0, 100, 1_000, 10_000)]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == 4
    assert lm.prefill_s(10_000) == pytest.approx(0.002 + 1.0)
    itls = [lm.itl_s(b) for b in (1, 8, 64, 256)]
    assert itls == sorted(itls) and itls[0] == pytest.approx(0.005)
    # Mild: a full batch is slower per token, but not by an order of magnitude.
    assert itls[-1] < 10 * itls[0]
    with pytest.raises(ValueError):
        LatencyModel(prefill_tokens_per_s=0)


def test_prefix_cache_counts_leading_blocks_and_always_recomputes_the_last_token() -> None:
    cache = PrefixCache()
    prompt = list(range(100, 164))
    assert cache.match_and_insert(prompt) == 0
    assert cache.match_and_insert(prompt) == 63
    assert cache.match_and_insert(prompt[:32] + [7] * 32) == 32
    cache.clear()
    assert cache.match_and_insert(prompt) == 0


def test_contract_rejects_unknown_sampling_params_with_serde_text() -> None:
    with pytest.raises(ContractError) as exc:
        protocol.check_generate_contract({"text": "hi", "sampling_params": {"max_new_tokens": 4, "bogus": 1}})
    assert str(exc.value).startswith("unknown field `bogus`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`")
    assert str(exc.value).endswith("`watermark`, `choice`")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": 5}, "invalid type: integer `5`, expected a value or an array of values for StringOrList"),
        ({"text": "x", "stream": "yes"}, 'invalid type: string "yes", expected a boolean'),
        ({"text": "x", "sampling_params": {"max_new_tokens": 1.5}}, "invalid type: floating point `1.5`, expected i64"),
        ({"text": "x", "sampling_params": {"temperature": "hot"}}, 'invalid type: string "hot", expected f64'),
        ({"text": "x", "bootstrap_room": "r"}, 'invalid type: string "r", expected a value or an array of values for OptionalInt64OrList'),
        ([1, 2], "invalid type: sequence, expected struct GenerateRequest"),
    ],
)
def test_contract_type_errors(body: object, message: str) -> None:
    with pytest.raises(ContractError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        protocol.check_generate_contract(body)


def test_contract_ignores_unknown_top_level_keys_like_the_ones_smg_adds() -> None:
    body = {"text": "hi", "model": "unknown", "log_metrics": True, "background": False, "return_bytes": False, "no_logs": False}
    protocol.check_generate_contract(body)
    reqs, batch = protocol.generate_requests(body, lambda: "rid-1", Limits(32768))
    assert len(reqs) == 1 and not batch and reqs[0].rid == "rid-1"


def test_semantic_checks_match_sglang_messages() -> None:
    with pytest.raises(RequestError, match=r"^Either text, input_ids or input_embeds should be provided\.$"):
        protocol.generate_requests({"sampling_params": {}}, lambda: "r", Limits(100))
    with pytest.raises(RequestError, match=r"top_p must be in \(0, 1\], got 0.0\."):
        protocol.to_sampling({"top_p": 0.0})
    with pytest.raises(RequestError, match=r"The input \(5 tokens\) is longer than the model's context length \(5 tokens\)\."):
        protocol.generate_requests({"input_ids": [1, 2, 3, 4, 5]}, lambda: "r", Limits(5))
    with pytest.raises(RequestError, match="Requested token count exceeds the model's maximum context length of 10 tokens"):
        protocol.generate_requests({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 9}}, lambda: "r", Limits(10))


def test_batches_expand_per_prompt_and_per_sample() -> None:
    body = {"text": ["a", "b c"], "sampling_params": [{"max_new_tokens": 1}, {"max_new_tokens": 2, "n": 2}], "rid": ["x", "y"]}
    reqs, batch = protocol.generate_requests(body, lambda: "r", Limits(100))
    assert batch
    assert [(r.rid, r.sampling.max_new_tokens, r.sample_index) for r in reqs] == [("x", 1, 0), ("y-0", 2, 0), ("y-1", 2, 1)]
    assert protocol.generate_requests({"input_ids": [[1], [2, 3]]}, lambda: "r", Limits(1000))[1]


def test_admission_is_fifo_bounded_by_slots_and_tokens() -> None:
    async def scenario() -> list[str]:
        adm = Admission(max_running=2, max_tokens=100)
        order: list[str] = []

        async def job(name: str, tokens: int) -> None:
            await adm.acquire(tokens)
            order.append(name)

        await adm.acquire(10)
        await adm.acquire(10)
        tasks = [asyncio.create_task(job("c", 10)), asyncio.create_task(job("d", 10))]
        await asyncio.sleep(0)
        assert adm.waiting == 2 and adm.running == 2
        adm.release(10)
        await asyncio.sleep(0)
        assert order == ["c"]
        adm.release(10)
        await asyncio.gather(*tasks)
        # A prompt that does not fit the KV pool waits although a slot is free.
        adm.release(10)
        big = asyncio.create_task(job("big", 95))
        await asyncio.sleep(0)
        assert order == ["c", "d"] and adm.waiting == 1
        adm.release(10)
        await big
        return order

    assert asyncio.run(scenario()) == ["c", "d", "big"]
