"""The simulator against queueing theory where it has a closed form, and against Little's law.

A prefill group with one lane and no chunking is a single FCFS server whose service time is
prompt tokens / throughput, so with Poisson arrivals it is M/M/1 for exponential prompt lengths
and M/D/1 for fixed ones. Seeds are fixed; 200,000 requests put the sampling error of the mean
wait near 1.5 % at load 0.7 (measured over 16 seeds), so 4 % is a real check.
"""

from __future__ import annotations

import numpy as np
import pytest

from inferplane.planner.profile import Curves, Profile
from inferplane.planner.sim import simulate
from inferplane.planner.workload import Slo, empirical, fixed
from tests.unit.planner_profiles import curves, hand_profile, queue_profile

NO_SLO = Slo(ttft_seconds=1e9, tpot_seconds=1e9)
N = 200_000
TOLERANCE = 0.04


@pytest.mark.parametrize("load", [0.5, 0.7])
def test_mm1_mean_wait(load: float) -> None:
    c = queue_profile(100_000)
    lengths = np.ceil(np.random.default_rng(1).exponential(10_000, size=200_000)).astype(int)
    w = empirical("exponential", lengths, np.ones_like(lengths))
    mu = 100_000 / w.mean_input
    lam = load * mu
    r = simulate(w, lam, c, NO_SLO, 1, 1, n_requests=N, seed=3, prefill_only=True)
    expected = load / (mu - lam)  # M/M/1: Wq = rho / (mu - lambda)
    assert r.mean_prefill_wait == pytest.approx(expected, rel=TOLERANCE)


@pytest.mark.parametrize("load", [0.5, 0.8])
def test_md1_mean_wait(load: float) -> None:
    c = queue_profile(100_000)
    w = fixed("deterministic", 10_000, 1)  # service 0.1 s
    r = simulate(w, load * 10, c, NO_SLO, 1, 1, n_requests=N, seed=3, prefill_only=True)
    expected = load / (2 * 10 * (1 - load))  # M/D/1: Wq = rho / (2 mu (1 - rho))
    assert r.mean_prefill_wait == pytest.approx(expected, rel=TOLERANCE)


def test_chunking_that_splits_prompts_evenly_keeps_the_md1_wait() -> None:
    # Four chunks per prompt, no room to pack the next prompt in: the same work in the same order.
    c = queue_profile(100_000, chunk_tokens=2_500)
    r = simulate(fixed("d", 10_000, 1), 7, c, NO_SLO, 1, 1, n_requests=N, seed=3, prefill_only=True)
    assert r.mean_prefill_wait == pytest.approx(0.7 / (2 * 10 * 0.3), rel=TOLERANCE)


def test_chunked_prefill_packs_short_prompts_into_one_step() -> None:
    # 1,000-token prompts at 50 % load: unchunked every prompt is its own 10 ms step; with a 16K
    # budget queued prompts share a step and finish together at its end, so more of them wait
    # less than a whole step behind another, and the lane is busy for exactly the same time.
    c_plain, c_chunked = queue_profile(100_000), queue_profile(100_000, chunk_tokens=16_384)
    w = fixed("short", 1_000, 1)
    plain = simulate(w, 50, c_plain, NO_SLO, 1, 1, n_requests=50_000, seed=1, prefill_only=True)
    chunked = simulate(w, 50, c_chunked, NO_SLO, 1, 1, n_requests=50_000, seed=1, prefill_only=True)
    assert chunked.prefill_busy == pytest.approx(plain.prefill_busy, rel=1e-3)
    assert chunked.mean_prefill_wait < plain.mean_prefill_wait


def test_more_lanes_share_the_throughput() -> None:
    # Two lanes: each prompt runs at half the group's throughput, so unloaded TTFT doubles.
    w = fixed("d", 10_000, 1)
    one = simulate(w, 0.01, queue_profile(100_000), NO_SLO, 1, 1, n_requests=2_000, seed=0, prefill_only=True)
    two = simulate(w, 0.01, queue_profile(100_000, lanes=2), NO_SLO, 1, 1, n_requests=2_000, seed=0, prefill_only=True)
    assert one.ttft_p50 == pytest.approx(0.1, rel=1e-6)
    assert two.ttft_p50 == pytest.approx(0.2, rel=1e-6)


def _flat_decode(seconds: float, max_batch: int = 1000, **decode: object) -> Curves:
    doc = hand_profile()
    doc["decode"]["tpot_seconds"] = {"context_tokens": [1000, 10000], "batch": [1, max_batch], "seconds": [[seconds] * 2] * 2}
    doc["decode"].update(decode)
    return Curves(Profile.model_validate(doc))


def test_decode_batch_obeys_littles_law_and_tpot_is_the_iteration_time() -> None:
    # Constant 20 ms iterations: each request stays 100 x 20 ms = 2 s, so 50 req/s keep 100 running.
    r = simulate(fixed("w", 1000, 100), 50, _flat_decode(0.02), NO_SLO, 10, 1, n_requests=20_000, seed=0)
    assert r.mean_decode_batch == pytest.approx(100, rel=0.03)
    assert r.tpot_p50 == pytest.approx(0.02, rel=1e-6) and r.tpot_p99 == pytest.approx(0.02, rel=1e-6)


def test_tpot_follows_the_profile_at_the_batch_the_group_runs() -> None:
    c = curves()
    w = fixed("w", 1000, 100)
    r = simulate(w, 30, c, NO_SLO, 6, 1, n_requests=30_000, seed=0)
    assert 20 < r.mean_decode_batch < 90
    assert r.tpot_p50 == pytest.approx(c.tpot(r.mean_decode_batch, w.running_context()), rel=0.05)


def test_more_decode_batch_means_slower_tokens() -> None:
    c, w = curves(), fixed("w", 1000, 100)
    light = simulate(w, 10, c, NO_SLO, 2, 1, n_requests=10_000, seed=0)
    heavy = simulate(w, 30, c, NO_SLO, 6, 1, n_requests=10_000, seed=0)
    assert heavy.mean_decode_batch > light.mean_decode_batch and heavy.tpot_p50 > light.tpot_p50


@pytest.mark.parametrize("limit", [{"max_running_requests": 20}, {"kv_tokens": 20 * 1100}])
def test_full_decode_groups_hold_requests_back_and_ttft_pays(limit: dict[str, int]) -> None:
    # 100 running requests are needed (Little's law above); room for 20 makes requests queue for admission.
    slo = Slo(ttft_seconds=1.0, tpot_seconds=1.0)
    roomy = simulate(fixed("w", 1000, 100), 50, _flat_decode(0.02), slo, 10, 1, n_requests=5_000, seed=0)
    full = simulate(fixed("w", 1000, 100), 50, _flat_decode(0.02, **limit), slo, 10, 1, n_requests=5_000, seed=0)
    assert roomy.attainment_ttft == 1.0 and roomy.mean_admission_wait < 1e-9
    assert full.mean_decode_batch <= 20 + 1e-9
    assert full.mean_admission_wait > 1.0 and full.attainment_ttft < 0.5
    assert full.attainment_tpot == 1.0  # the ones that run still stream at 20 ms


def test_same_seed_same_answer_and_every_size_sees_the_same_requests() -> None:
    c, w = curves(), fixed("w", 1000, 100)
    slo = Slo(ttft_seconds=0.5, tpot_seconds=0.02)
    a = simulate(w, 100, c, slo, 14, 5, n_requests=5_000, seed=7)
    b = simulate(w, 100, c, slo, 14, 5, n_requests=5_000, seed=7)
    assert a.as_dict() | {"wall_seconds": 0} == b.as_dict() | {"wall_seconds": 0}
    bigger = simulate(w, 100, c, slo, 20, 8, n_requests=5_000, seed=7)
    assert bigger.simulated_seconds == a.simulated_seconds  # common random numbers: same arrivals
    assert bigger.attainment >= a.attainment


def test_trace_arrivals_replay_the_gaps_at_the_requested_rate(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from inferplane.planner.workload import load_trace

    # Bursts: ten requests 1 ms apart, then a 9.99 s pause; the mean rate is 1 req/s.
    stamps = [burst * 10.0 + k * 0.001 for burst in range(50) for k in range(10)]
    path = tmp_path / "bursty.jsonl"
    path.write_text("\n".join(f'{{"input_tokens": 1000, "output_tokens": 10, "timestamp": {t}}}' for t in stamps))
    w = load_trace(path)
    c = queue_profile(10_000)  # 0.1 s per prompt: a burst of ten queues for up to 0.9 s
    bursty = simulate(w, 1.0, c, NO_SLO, 1, 1, n_requests=5_000, seed=0, arrivals="trace", prefill_only=True)
    poisson = simulate(w, 1.0, c, NO_SLO, 1, 1, n_requests=5_000, seed=0, prefill_only=True)
    assert bursty.simulated_seconds == pytest.approx(5_000, rel=0.02)
    assert bursty.mean_prefill_wait > 3 * poisson.mean_prefill_wait
