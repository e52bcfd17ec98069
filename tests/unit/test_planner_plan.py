"""The plan: the smallest simulated configuration meeting the target, monotone in the rate."""

from __future__ import annotations

import itertools

import pytest

from inferplane.planner import formula
from inferplane.planner.plan import plan, smallest
from inferplane.planner.profile import Curves, load_profile
from inferplane.planner.sim import simulate
from inferplane.planner.workload import SEEDS, Slo
from tests.conftest import REPO_ROOT

CURVES = Curves(load_profile(REPO_ROOT / "profiles" / "h200-deepseek-v3.yaml"))
N = 5_000


def _plan(name: str, rate: float, **kw: object):  # type: ignore[no-untyped-def]
    w = SEEDS[name]
    assert w.slo is not None
    return plan(w, rate, CURVES, w.slo, prefill_gpus_per_group=16, decode_gpus_per_group=32, n_requests=N, **kw)  # type: ignore[arg-type]


class Probe:
    def __init__(self, answer: int) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, n: int) -> bool:
        self.calls.append(n)
        return n >= self.answer


@pytest.mark.parametrize(("answer", "start", "lower"), [(10, 10, 1), (10, 40, 1), (10, 3, 1), (10, 40, 10), (1, 5, 1), (37, 37, 37)])
def test_smallest_finds_the_boundary_of_a_monotone_predicate(answer: int, start: int, lower: int) -> None:
    probe = Probe(answer)
    assert smallest(probe, start, lower, 1000) == answer
    # Galloping plus bisection: logarithmic in the distance searched, never a scan.
    assert len(probe.calls) <= 2 + 2 * (abs(start - answer) + max(start - lower, 0) + 1).bit_length()


def test_smallest_tries_the_lower_bound_right_after_a_passing_start() -> None:
    probe = Probe(12)
    assert smallest(probe, 30, 12, 100) == 12
    assert probe.calls == [30, 12]


def test_smallest_gives_up_at_the_limit() -> None:
    assert smallest(Probe(500), 10, 1, 100) is None


def test_plan_meets_the_target_and_one_group_less_does_not() -> None:
    p = _plan("code", 100)
    w = SEEDS["code"]
    assert w.slo is not None
    assert p.result.attainment >= 0.99
    design = 100 / p.utilisation
    stable = (p.sizing.prefill.stable_groups(1 / p.utilisation), p.sizing.decode.stable_groups(1 / p.utilisation))
    for fewer in ((p.prefill_groups - 1, p.decode_groups), (p.prefill_groups, p.decode_groups - 1)):
        if fewer[0] < stable[0] or fewer[1] < stable[1]:
            continue  # below the stability bound: never a candidate
        r = simulate(w, design, CURVES, w.slo, *fewer, n_requests=N)
        assert r.attainment < 0.99, fewer


def test_plan_never_goes_below_the_stability_bound() -> None:
    # At this rate a finite simulation of one prefill group too few still looks fine (the queue has
    # no time to grow); the plan must not take it.
    p = _plan("chat", 400)
    assert p.prefill_groups >= p.sizing.prefill.stable_groups(1 / p.utilisation)
    assert p.prefill_groups * p.sizing.prefill.saturated_tokens_per_s * 0.95 >= 400 / p.utilisation * 2048


def test_min_groups_floor_holds_the_slos_at_the_planned_rate() -> None:
    p = _plan("rag", 40)
    assert p.floor_result is not None and p.floor_result.attainment >= 0.99
    assert p.floor[0] < p.prefill_groups  # the headroom is real groups
    assert p.floor_result.rate_rps == 40


@pytest.mark.parametrize("name", ["chat", "rag"])
def test_more_rate_never_needs_fewer_groups(name: str) -> None:
    rates = [25, 50, 100, 150, 200, 300] if name == "chat" else [5, 10, 20, 30, 45, 60]
    plans = [_plan(name, r) for r in rates]
    groups = [(p.prefill_groups, p.decode_groups) for p in plans]
    for a, b in itertools.pairwise(groups):
        assert b[0] >= a[0] and b[1] >= a[1], groups


def test_four_seed_workloads_get_different_ratios_from_the_same_profile() -> None:
    plans = {n: _plan(n, r) for n, r in (("chat", 200), ("code", 60), ("rag", 20), ("long", 2))}
    ratios = {n: round(p.prefill_groups / p.decode_groups, 3) for n, p in plans.items()}
    assert len(set(ratios.values())) == 4, ratios
    assert all(p.result.attainment >= 0.99 for p in plans.values())


def test_formula_only_skips_the_simulation() -> None:
    p = _plan("chat", 100, simulate_plan=False)
    s = formula.size(SEEDS["chat"], 100, CURVES, SEEDS["chat"].slo or Slo(ttft_seconds=1, tpot_seconds=1))
    assert (p.prefill_groups, p.decode_groups) == (s.prefill.groups, s.decode.groups)
    assert p.evaluated == []
