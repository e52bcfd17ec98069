"""The plan: the smallest P/D configuration whose simulated SLO attainment meets the target.

The formula gives a starting point close to the answer; the simulator is the judge. Sizing with a
target utilisation u < 1 means the pool must hold the SLOs at rate / u (the headroom), so the
simulator runs at that rate and the formula's answer already includes it.

Search, in the order a request meets the pools:
1. prefill: the fewest prefill groups whose TTFT attainment meets the target while decode is
   generously sized (so decode admission cannot mask a prefill shortage);
2. decode: with that prefill, the fewest decode groups whose attainment of both SLOs meets it;
   if no decode size rescues the prefill's margin, one more prefill group and again.
Each one-dimensional search gallops from the formula's answer (+-1, 2, 4, ...) and then bisects,
so a good formula costs two or three simulations per pool. Every configuration is simulated on
the same requests (same seed), so attainment is compared without sampling noise between sizes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inferplane.errors import ConfigError
from inferplane.planner import formula
from inferplane.planner.profile import Curves
from inferplane.planner.sim import Arrivals, SimResult, simulate
from inferplane.planner.workload import Slo, Workload

# Past this many times the formula's answer the search gives up: the profile and the simulator
# disagree so much that the profile is what needs looking at.
SEARCH_LIMIT_FACTOR = 8


@dataclass(frozen=True)
class Plan:
    workload: Workload
    rate_rps: float
    slo: Slo
    target: float
    utilisation: float
    sizing: formula.Sizing
    prefill_groups: int
    decode_groups: int
    prefill_gpus_per_group: int
    decode_gpus_per_group: int
    result: SimResult  # the chosen configuration at the design rate (rate / utilisation)
    floor: tuple[int, int]  # fewest groups that hold the SLOs at the planned rate itself (no headroom)
    floor_result: SimResult | None
    evaluated: list[SimResult] = field(default_factory=list)  # every simulation run, in order (design rate, then planned rate)
    wall_seconds: float = 0.0

    @property
    def design_rate(self) -> float:
        return self.rate_rps / self.utilisation

    @property
    def gpus(self) -> int:
        return self.prefill_groups * self.prefill_gpus_per_group + self.decode_groups * self.decode_gpus_per_group

    @property
    def tokens_per_second(self) -> float:
        w = self.workload
        return self.rate_rps * (w.mean_input + w.mean_output)

    def cost_per_million_tokens(self, gpu_hour_usd: float) -> float:
        """USD per million tokens (prompt + generated) at the planned rate."""
        return self.gpus * gpu_hour_usd / (self.tokens_per_second * 3600 / 1e6)

    def cost_per_million_output_tokens(self, gpu_hour_usd: float) -> float:
        return self.gpus * gpu_hour_usd / (self.rate_rps * self.workload.mean_output * 3600 / 1e6)


class _Evaluator:
    def __init__(self, run: Callable[[int, int], SimResult]) -> None:
        self._run = run
        self.cache: dict[tuple[int, int], SimResult] = {}
        self.order: list[SimResult] = []

    def __call__(self, p: int, d: int) -> SimResult:
        key = (p, d)
        if key not in self.cache:
            self.cache[key] = self._run(p, d)
            self.order.append(self.cache[key])
        return self.cache[key]


def smallest(ok: Callable[[int], bool], start: int, lower: int, limit: int) -> int | None:
    """Smallest n in [lower, limit] with ok(n), for a monotone ok, probing from ``start``.

    If ``start`` passes, ``lower`` is tried next (pooled groups often run right up to the stability
    bound), then the gap is bisected; if it fails, the search gallops upward (+1, +2, +4, ...).
    """
    start = min(max(start, lower), limit)
    if ok(start):
        good = start
        if good == lower or ok(lower):
            return lower
        bad = lower
    else:
        bad, step = start, 1
        while True:
            cand = min(bad + step, limit)
            if ok(cand):
                good = cand
                break
            if cand == limit:
                return None
            bad, step = cand, step * 2
    while good - bad > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def plan(
    workload: Workload,
    rate: float,
    curves: Curves,
    slo: Slo,
    *,
    target: float = 0.99,
    utilisation: float = 0.85,
    prefill_gpus_per_group: int,
    decode_gpus_per_group: int,
    n_requests: int = 10_000,
    seed: int = 0,
    arrivals: Arrivals = "poisson",
    simulate_plan: bool = True,
) -> Plan:
    started = time.perf_counter()
    sizing = formula.size(workload, rate, curves, slo, target=target, utilisation=utilisation)
    if arrivals == "trace" and workload.arrival_gaps is None:
        raise ConfigError("--arrivals", ["--arrivals: trace needs a JSONL trace whose lines all carry a timestamp; use poisson"])
    if not simulate_plan:
        return _formula_only(workload, rate, slo, target, utilisation, sizing, prefill_gpus_per_group, decode_gpus_per_group, started)

    def run_at(r: float) -> Callable[[int, int], SimResult]:
        return lambda p, d: simulate(workload, r, curves, slo, p, d, n_requests=n_requests, seed=seed, arrivals=arrivals)

    scale = 1.0 / utilisation
    p0, d0 = sizing.prefill.groups, sizing.decode.groups
    p_low, d_low = sizing.prefill.stable_groups(scale), sizing.decode.stable_groups(scale)
    p_limit, d_limit = SEARCH_LIMIT_FACTOR * p0 + 8, SEARCH_LIMIT_FACTOR * d0 + 8
    evaluate = _Evaluator(run_at(rate * scale))

    generous_d = max(math.ceil(1.5 * d0) + 1, d_low)
    p_best = smallest(lambda p: evaluate(p, generous_d).attainment_ttft >= target, p0, p_low, p_limit)
    if p_best is None:
        raise _no_plan("prefill", p_limit, evaluate.order[-1], target)
    d_best = None
    while d_best is None:
        d_best = smallest(lambda d, p=p_best: evaluate(p, d).attainment >= target, d0, d_low, d_limit)  # type: ignore[misc]
        if d_best is None:
            if p_best >= p_limit:
                raise _no_plan("decode", d_limit, evaluate.order[-1], target)
            p_best += 1
    chosen = evaluate(p_best, d_best)

    floor, floor_result = (p_best, d_best), None
    evaluated = list(evaluate.order)
    if utilisation < 1:
        floor, floor_result, at_rate = _floor(run_at(rate), sizing, p_best, d_best, utilisation, target)
        evaluated += at_rate
    return Plan(
        workload=workload,
        rate_rps=rate,
        slo=slo,
        target=target,
        utilisation=utilisation,
        sizing=sizing,
        prefill_groups=p_best,
        decode_groups=d_best,
        prefill_gpus_per_group=prefill_gpus_per_group,
        decode_gpus_per_group=decode_gpus_per_group,
        result=chosen,
        floor=floor,
        floor_result=floor_result,
        evaluated=evaluated,
        wall_seconds=time.perf_counter() - started,
    )


def _floor(
    run: Callable[[int, int], SimResult], sizing: formula.Sizing, p: int, d: int, utilisation: float, target: float
) -> tuple[tuple[int, int], SimResult, list[SimResult]]:
    """Fewest groups that still hold the SLOs at the planned rate itself: what an upgrade may drain to.

    The headroom the target utilisation bought, in groups; searched like the plan, from the formula's
    guess (``utilisation`` x groups) and never below the stability bound at the planned rate.
    """
    evaluate = _Evaluator(run)
    p_low, d_low = min(sizing.prefill.stable_groups(1.0), p), min(sizing.decode.stable_groups(1.0), d)
    p_floor = smallest(lambda x: evaluate(x, d).attainment_ttft >= target, math.ceil(p * utilisation - 1e-9), p_low, p) or p
    d_floor = smallest(lambda x: evaluate(p_floor, x).attainment >= target, math.ceil(d * utilisation - 1e-9), d_low, d) or d
    result = evaluate(p_floor, d_floor)
    if result.attainment < target:
        return (p, d), evaluate(p, d), evaluate.order
    return (p_floor, d_floor), result, evaluate.order


def _formula_only(
    workload: Workload,
    rate: float,
    slo: Slo,
    target: float,
    utilisation: float,
    sizing: formula.Sizing,
    p_gpus: int,
    d_gpus: int,
    started: float,
) -> Plan:
    p, d = sizing.prefill.groups, sizing.decode.groups
    floor = (max(1, math.ceil(p * utilisation - 1e-9)), max(1, math.ceil(d * utilisation - 1e-9)))
    nan = math.nan
    empty = SimResult(p, d, rate / utilisation, 0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, 0.0, 0, 0.0)
    return Plan(
        workload, rate, slo, target, utilisation, sizing, p, d, p_gpus, d_gpus, empty, floor, None, [], time.perf_counter() - started
    )


def _no_plan(pool: str, limit: int, last: SimResult, target: float) -> ConfigError:
    return ConfigError(
        "plan",
        [
            f"{pool}: no configuration up to {limit} {pool} groups reaches {target:.1%} attainment in simulation "
            f"(last tried {last.prefill_groups}P/{last.decode_groups}D: TTFT {last.attainment_ttft:.1%}, TPOT {last.attainment_tpot:.1%}); "
            "the profile's curves disagree with its own TTFT/TPOT points, check the profile"
        ],
    )
