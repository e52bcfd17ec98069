"""Analytic sizing: how many prefill and decode groups a workload needs, and what limits each pool.

Prefill.  A group's saturated prompt throughput on the workload's mix is E[L] / E[L / T(L)]
(T from the profile; the harmonic form weighs each prompt by the time it costs). The TTFT SLO
allows loading a group only up to the highest load at which the profile's p99 TTFT, plus the KV
transfer and the first decode iteration, stays within the SLO for ``target`` of the prompts; the
group's capacity at the SLO is that load times the saturated throughput.

Decode.  A group's throughput at batch b is b / TPOT(b, c) generated tokens/s, c being the mean
context of a steady-state batch. The batch is capped by the first of: the TPOT SLO, the KV cache
(each running request reserves prompt + answer), max running requests, and the largest batch the
profile measured. The group's capacity at the SLO is the throughput at that cap.

Both pools.  groups = ceil(demand / (capacity at the SLO x target utilisation)); the utilisation
below 1 is the headroom the plan keeps for bursts, a lost group and growth. The constraint that
set the capacity is reported as the one that binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from inferplane.errors import ConfigError
from inferplane.planner.profile import Curves
from inferplane.planner.workload import Slo, Workload

# Binding constraints, as printed.
TTFT_SLO = "TTFT SLO"
PREFILL_SATURATION = "prefill saturation"
TPOT_SLO = "TPOT SLO"
KV_CACHE = "KV cache"
MAX_RUNNING = "max running requests"
MEASURED_BATCH = "largest measured batch"


@dataclass(frozen=True)
class PoolSizing:
    role: str
    demand_tokens_per_s: float  # prompt tokens/s (prefill) or generated tokens/s (decode) the workload brings
    saturated_tokens_per_s: float  # per group: prefill at full load; decode at the largest batch it can hold, SLO aside
    capacity_tokens_per_s: float  # per group, at the SLO
    groups: int
    binds: str
    detail: str
    operating_point: dict[str, float] = field(default_factory=dict)
    max_load: float = 1.0  # highest fraction of saturated throughput the pool may run at (prefill: highest measured load)

    def utilisation(self, groups: int) -> float:
        """Demand as a fraction of ``groups`` groups' capacity at the SLO."""
        return self.demand_tokens_per_s / (groups * self.capacity_tokens_per_s) if groups else math.inf

    def headroom(self, groups: int) -> float:
        """Extra demand ``groups`` groups absorb before the SLO capacity is reached (0.25 = 25 %)."""
        return 1.0 / self.utilisation(groups) - 1.0

    def groups_for(self, demand_scale: float, utilisation: float) -> int:
        return max(1, math.ceil(self.demand_tokens_per_s * demand_scale / (self.capacity_tokens_per_s * utilisation) - 1e-9))

    def stable_groups(self, demand_scale: float) -> int:
        """Fewest groups that keep the pool within the measured range (below saturation): no plan goes under it.

        A simulation of finite length can show an overloaded pool meeting its SLOs because its queue
        has not had time to grow; this bound keeps such configurations out of the answer.
        """
        return max(1, math.ceil(self.demand_tokens_per_s * demand_scale / (self.saturated_tokens_per_s * self.max_load) - 1e-9))


@dataclass(frozen=True)
class Sizing:
    workload: str
    rate_rps: float
    slo: Slo
    target: float
    utilisation: float
    prefill: PoolSizing
    decode: PoolSizing

    @property
    def ratio(self) -> float:
        return self.prefill.groups / self.decode.groups


def _prefill_load_at_slo(workload: Workload, curves: Curves, budgets: np.ndarray, target: float) -> float:
    """Highest load at which the share of prompts whose p99 TTFT fits their budget is >= target."""
    loads = curves.profile.prefill.ttft_p99_seconds.load
    inputs = workload.inputs.tolist()

    def share_ok(load: float) -> float:
        ok = np.array([curves.ttft_p99(x, load) for x in inputs]) <= budgets
        return float(workload.probs[ok].sum())

    lo_load, hi_load = loads[0], loads[-1]
    if share_ok(lo_load) < target:
        return 0.0
    if share_ok(hi_load) >= target:
        return hi_load
    lo, hi = lo_load, hi_load
    for _ in range(50):
        mid = (lo + hi) / 2
        if share_ok(mid) >= target:
            lo = mid
        else:
            hi = mid
    return lo


def size_decode(workload: Workload, rate: float, curves: Curves, slo: Slo) -> PoolSizing:
    context = workload.running_context()
    caps = {
        KV_CACHE: curves.kv_tokens / workload.running_reservation(),
        MAX_RUNNING: float(curves.max_running_requests),
        MEASURED_BATCH: float(curves.measured_batch),
    }
    limit = min(caps.values())
    if curves.tpot(1, context) > slo.tpot_seconds:
        raise ConfigError(
            "--slo-tpot",
            [
                f"--slo-tpot: {slo.tpot_seconds} s is below one request's decode iteration at {context:.0f} tokens of context "
                f"({curves.tpot(1, context):.4f} s in the profile); raise the TPOT SLO or use a faster decode group"
            ],
        )
    if curves.tpot(limit, context) <= slo.tpot_seconds:
        batch = limit
        binds = min(caps, key=lambda k: caps[k])
    else:
        lo, hi = 1.0, limit
        for _ in range(60):
            mid = (lo + hi) / 2
            if curves.tpot(mid, context) <= slo.tpot_seconds:
                lo = mid
            else:
                hi = mid
        batch, binds = lo, TPOT_SLO
    tau = curves.tpot(batch, context)
    capacity = batch / tau
    saturated = limit / curves.tpot(limit, context)
    demand = rate * workload.mean_output
    detail = {
        TPOT_SLO: f"{slo.tpot_seconds * 1000:g} ms reached at batch {batch:.0f}",
        KV_CACHE: f"{batch:.0f} requests of {workload.running_reservation():.0f} reserved tokens fill it; TPOT {tau * 1000:.1f} ms there",
        MAX_RUNNING: f"{batch:.0f}; TPOT {tau * 1000:.1f} ms there",
        MEASURED_BATCH: f"{batch:.0f}; TPOT {tau * 1000:.1f} ms there",
    }[binds]
    return PoolSizing(
        role="decode",
        demand_tokens_per_s=demand,
        saturated_tokens_per_s=saturated,
        capacity_tokens_per_s=capacity,
        groups=0,
        binds=binds,
        detail=detail,
        operating_point={"batch": batch, "tpot_seconds": tau, "context_tokens": context},
    )


def size_prefill(workload: Workload, rate: float, curves: Curves, slo: Slo, target: float, first_iteration: float) -> PoolSizing:
    inputs = workload.inputs.astype(float)
    work = np.array([curves.prefill_seconds(x) for x in inputs])
    saturated = workload.mean_input / workload.expect(work)
    transfer = np.array([curves.transfer_seconds(x) for x in inputs])
    budgets = slo.ttft_seconds - transfer - first_iteration
    load = _prefill_load_at_slo(workload, curves, budgets, target)
    if load <= 0:
        lowest = curves.profile.prefill.ttft_p99_seconds.load[0]
        worst = int(np.argmax(inputs))
        floor = curves.ttft_p99(inputs[worst], lowest) + transfer[worst] + first_iteration
        raise ConfigError(
            "--slo-ttft",
            [
                f"--slo-ttft: {slo.ttft_seconds} s cannot be met even at {lowest:.0%} load: a {int(inputs[worst])}-token prompt takes "
                f"{floor:.2f} s to its first token (prefill p99 + KV transfer + first decode iteration); raise the TTFT SLO "
                "or use a profile with faster prefill"
            ],
        )
    hi_load = curves.profile.prefill.ttft_p99_seconds.load[-1]
    binds = TTFT_SLO if load < hi_load else PREFILL_SATURATION
    detail = (
        f"p99 within {slo.ttft_seconds:g} s up to {load:.0%} load"
        if binds == TTFT_SLO
        else f"TTFT holds up to the highest measured load, {load:.0%}"
    )
    return PoolSizing(
        role="prefill",
        demand_tokens_per_s=rate * workload.mean_input,
        saturated_tokens_per_s=saturated,
        capacity_tokens_per_s=saturated * load,
        groups=0,
        binds=binds,
        detail=detail,
        operating_point={"load": load},
        max_load=hi_load,
    )


def coverage(workload: Workload, curves: Curves) -> None:
    problems = curves.profile.coverage_problems(workload.max_input, workload.max_context)
    largest = int((workload.inputs + workload.outputs).max())
    if largest > curves.kv_tokens:
        problems.append(
            f"decode.kv_tokens: a {largest}-token request does not fit one decode group's KV cache ({curves.kv_tokens} tokens); "
            "use larger decode groups"
        )
    if problems:
        raise ConfigError(f"profile {curves.profile.name}", problems)


def size(workload: Workload, rate: float, curves: Curves, slo: Slo, target: float = 0.99, utilisation: float = 0.85) -> Sizing:
    """Groups per pool for ``rate`` req/s of ``workload`` at ``slo``, keeping ``1 - utilisation`` headroom."""
    if rate <= 0:
        raise ConfigError("--rate", [f"--rate: must be > 0 requests/s (got {rate})"])
    if not 0 < utilisation <= 1:
        raise ConfigError("--utilisation", [f"--utilisation: a fraction in (0, 1] (got {utilisation})"])
    if not 0 < target < 1:
        raise ConfigError("--target", [f"--target: a fraction in (0, 1), e.g. 0.99 (got {target})"])
    coverage(workload, curves)
    decode = size_decode(workload, rate, curves, slo)
    prefill = size_prefill(workload, rate, curves, slo, target, first_iteration=decode.operating_point["tpot_seconds"])
    pools = [replace(p, groups=p.groups_for(1.0, utilisation)) for p in (prefill, decode)]
    return Sizing(workload=workload.name, rate_rps=rate, slo=slo, target=target, utilisation=utilisation, prefill=pools[0], decode=pools[1])
