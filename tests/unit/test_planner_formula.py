"""The analytic sizing against cases worked out by hand (see planner_profiles.hand_profile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.errors import ConfigError
from inferplane.planner import formula
from inferplane.planner.profile import Curves, Profile, load_profile
from inferplane.planner.workload import SEEDS, Slo, empirical, fixed
from tests.conftest import REPO_ROOT
from tests.unit.planner_profiles import curves, hand_profile

W = fixed("w", 1000, 100)  # running context 1000 + 100/2 = 1050; reservation 1100
SLO = Slo(ttft_seconds=0.5, tpot_seconds=0.02)
# TPOT(b, 1050) = 0.01 + (b - 1)/99 x (0.02 + (50/9000) x 0.02) on the hand grid.
SLOPE = 0.02 + (50 / 9000) * 0.02


def tau(b: float) -> float:
    return 0.01 + (b - 1) / 99 * SLOPE


def test_tpot_slo_binds_decode_at_the_batch_where_tpot_meets_it() -> None:
    s = formula.size(W, 100, curves(), SLO, utilisation=0.85)
    batch = 1 + 99 * 0.01 / SLOPE  # tau(batch) = 0.02
    assert s.decode.binds == formula.TPOT_SLO
    assert s.decode.operating_point["batch"] == pytest.approx(batch, rel=1e-6)
    assert s.decode.capacity_tokens_per_s == pytest.approx(batch / 0.02, rel=1e-6)
    # demand 100 req/s x 100 tokens = 10,000 tokens/s; 10,000 / (2,511.3 x 0.85) = 4.68
    assert s.decode.groups == 5


def test_ttft_slo_binds_prefill_at_the_load_where_ttft_meets_its_budget() -> None:
    s = formula.size(W, 100, curves(), SLO, utilisation=0.85)
    # budget = 0.5 - transfer 0.001 - first iteration 0.02 = 0.479; TTFT(1000, load) = load - 0.3 -> load 0.779
    assert s.prefill.binds == formula.TTFT_SLO
    assert s.prefill.operating_point["load"] == pytest.approx(0.779, abs=1e-6)
    assert s.prefill.saturated_tokens_per_s == pytest.approx(10000)
    assert s.prefill.capacity_tokens_per_s == pytest.approx(7790, rel=1e-6)
    # demand 100,000 prompt tokens/s / (7,790 x 0.85) = 15.10
    assert s.prefill.groups == 16
    assert s.ratio == pytest.approx(16 / 5)


def test_generous_ttft_slo_lets_prefill_run_to_the_highest_measured_load() -> None:
    s = formula.size(W, 100, curves(), Slo(ttft_seconds=5.0, tpot_seconds=0.02), utilisation=1.0)
    assert s.prefill.binds == formula.PREFILL_SATURATION
    assert s.prefill.capacity_tokens_per_s == pytest.approx(9000)
    assert s.prefill.groups == math.ceil(100_000 / 9000)


def test_kv_cache_binds_when_it_holds_fewer_requests_than_the_slo_allows() -> None:
    s = formula.size(W, 100, curves(decode__kv_tokens=20_000), SLO, utilisation=1.0)
    batch = 20_000 / 1100
    assert s.decode.binds == formula.KV_CACHE
    assert s.decode.capacity_tokens_per_s == pytest.approx(batch / tau(batch), rel=1e-6)
    assert s.decode.groups == math.ceil(10_000 / (batch / tau(batch)))


def test_max_running_requests_binds_and_the_stack_setting_wins() -> None:
    s = formula.size(W, 100, curves(decode__max_running_requests=10), SLO, utilisation=1.0)
    assert s.decode.binds == formula.MAX_RUNNING
    assert s.decode.capacity_tokens_per_s == pytest.approx(10 / tau(10), rel=1e-6)
    stacked = Curves(Profile.model_validate(hand_profile()), max_running_requests=10)
    assert formula.size(W, 100, stacked, SLO, utilisation=1.0).decode.binds == formula.MAX_RUNNING


def test_largest_measured_batch_caps_decode_when_nothing_else_does() -> None:
    s = formula.size(W, 100, curves(), Slo(ttft_seconds=0.5, tpot_seconds=1.0), utilisation=1.0)
    assert s.decode.binds == formula.MEASURED_BATCH
    assert s.decode.operating_point["batch"] == 100


def test_mix_throughput_is_the_time_weighted_harmonic_mean() -> None:
    c = curves(
        prefill__throughput={"input_tokens": [1000, 100000], "tokens_per_second": [10000, 5000]},
        decode__tpot_seconds={"context_tokens": [1000, 200000], "batch": [1, 100], "seconds": [[0.01, 0.03], [0.01, 0.05]]},
    )
    mix = empirical("mix", np.array([1000, 100000]), np.array([100, 100]))
    s = formula.size(mix, 1, c, Slo(ttft_seconds=100, tpot_seconds=0.05))
    # E[L] = 50,500; E[L / T(L)] = 0.5 x 0.1 + 0.5 x 20 = 10.05
    assert s.prefill.saturated_tokens_per_s == pytest.approx(50_500 / 10.05)


def test_utilisation_is_headroom_on_top_of_slo_capacity() -> None:
    s = formula.size(W, 100, curves(), SLO, utilisation=0.5)
    assert s.prefill.groups == math.ceil(100_000 / (7790 * 0.5))
    assert s.decode.utilisation(s.decode.groups) <= 0.5


def test_unreachable_ttft_slo_is_a_one_line_error_naming_the_flag() -> None:
    with pytest.raises(ConfigError) as exc:
        formula.size(W, 100, curves(), Slo(ttft_seconds=0.1, tpot_seconds=0.02))
    (line,) = exc.value.problems
    assert line.startswith("--slo-ttft: 0.1 s cannot be met even at 50% load: a 1000-token prompt takes")


def test_unreachable_tpot_slo_is_a_one_line_error_naming_the_flag() -> None:
    with pytest.raises(ConfigError) as exc:
        formula.size(W, 100, curves(), Slo(ttft_seconds=0.5, tpot_seconds=0.005))
    (line,) = exc.value.problems
    assert line.startswith("--slo-tpot: 0.005 s is below one request's decode iteration")


def test_prompt_longer_than_measured_is_refused_not_extrapolated() -> None:
    with pytest.raises(ConfigError) as exc:
        formula.size(fixed("big", 200_000, 10), 1, curves(), Slo(ttft_seconds=100, tpot_seconds=1))
    assert any(p.startswith("prefill.throughput.input_tokens: the workload has 200000-token prompts") for p in exc.value.problems)


PROFILE = load_profile(REPO_ROOT / "profiles" / "h200-deepseek-v3.yaml")


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(SEEDS)),
    low=st.floats(min_value=0.1, max_value=2000),
    factor=st.floats(min_value=1.0, max_value=10),
    utilisation=st.floats(min_value=0.3, max_value=1.0),
)
def test_formula_never_needs_fewer_groups_for_more_rate(name: str, low: float, factor: float, utilisation: float) -> None:
    w, c = SEEDS[name], Curves(PROFILE)
    a = formula.size(w, low, c, w.slo, utilisation=utilisation)  # type: ignore[arg-type]
    b = formula.size(w, low * factor, c, w.slo, utilisation=utilisation)  # type: ignore[arg-type]
    assert b.prefill.groups >= a.prefill.groups and b.decode.groups >= a.decode.groups


def test_four_seed_workloads_get_four_different_ratios_and_binding_constraints() -> None:
    c = Curves(PROFILE)
    sizes = {n: formula.size(w, 100, c, w.slo) for n, w in SEEDS.items()}  # type: ignore[arg-type]
    ratios = {n: round(s.prefill.groups / s.decode.groups, 3) for n, s in sizes.items()}
    assert len(set(ratios.values())) == 4, ratios
    # Longer prompts per generated token need more prefill per decode.
    assert ratios["chat"] < ratios["code"] < ratios["rag"] < ratios["long"]
    assert {s.decode.binds for s in sizes.values()} >= {formula.TPOT_SLO, formula.KV_CACHE}
