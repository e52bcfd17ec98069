"""Discrete-event simulation of one P/D pool: does a configuration hold the SLOs, request by request?

The formula sizes each pool from averages; this checks the answer against what averages hide:
queueing bursts at the prefill groups, long prompts blocking short ones, decode admission when a
group's slots or KV cache are full, and the batch-dependent decode speed. What it models, in the
order a request meets it (each step is what SGLang PD with SMG in front does):

1. Arrival: Poisson at the given rate, or a trace's inter-arrival gaps rescaled to that rate.
   SMG picks the prefill and the decode group at once, on arrival: prefill by least outstanding
   work (what ``cache_aware`` falls back to when prompts share no prefix), decode by power of two
   choices on assigned requests (``power_of_two``).
2. Prefill: each group is ``lanes`` servers on one FCFS queue. A lane runs steps of at most
   ``chunk_tokens`` prompt tokens (chunked prefill): it continues its unfinished prompt first, then
   packs the next queued prompts into the step. A step lasts the sum of its pieces' compute time at
   the lane's share of the measured throughput for each prompt's length; a prompt is done at the
   end of the step holding its last token.
3. Decode admission: the request waits until its decode group has a free slot (running + in
   transfer < max running requests) and KV room for prompt + whole answer (reserved up front).
4. KV transfer: latency + prompt tokens x bytes per token / bandwidth.
5. Decode: the group runs iterations; every running request gains one token per iteration, which
   lasts TPOT(batch, mean context) from the profile. The first token arrives one iteration after
   joining. Between events the batch is constant, so the group is tracked by a virtual token clock
   rather than iteration by iteration (the cost is per request, not per token).

TTFT = arrival -> first token (prefill queue + prefill + admission wait + transfer + one
iteration); TPOT = (last token - first token) / (output tokens - 1).

Steady state from the first second: the decode groups start holding the batch Little's law
predicts (requests drawn length-biased, each part-way through its answer), because a decode batch
otherwise takes several answer lengths to fill, far longer than the prefill queues take to settle.
The first ``warmup`` of the arrivals is not measured. The run stops at the last arrival, so every
measured request saw full load; a request still generating then is judged on the tokens it has
produced, and a request without a first token is a miss if it already waited past the TTFT SLO,
otherwise it is left out (censored).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Literal

import numpy as np

from inferplane.planner.profile import Curves
from inferplane.planner.workload import Slo, Workload

Arrivals = Literal["poisson", "trace"]

_ARRIVE, _STEP_END, _XFER_DONE, _DECODE_DUE = 0, 1, 2, 3


@dataclass(frozen=True)
class SimResult:
    prefill_groups: int
    decode_groups: int
    rate_rps: float
    requests: int  # measured (after warm-up, not censored for TTFT)
    attainment_ttft: float
    attainment_tpot: float
    attainment: float  # both SLOs
    goodput_rps: float  # requests/s within both SLOs: rate x attainment
    goodput_tokens_per_s: float  # their prompt + output tokens per second
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    tpot_p99: float
    mean_prefill_wait: float  # arrival -> start of prefill, seconds
    mean_admission_wait: float  # prefill done -> admitted by the decode group, seconds
    prefill_busy: float  # fraction of prefill lane time computing
    mean_decode_batch: float  # time-averaged running requests per decode group
    simulated_seconds: float
    arrivals: int
    wall_seconds: float  # setup and run

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


class _PrefillGroup:
    __slots__ = ("busy", "current", "idle", "queue", "remaining")

    def __init__(self, lanes: int) -> None:
        self.queue: deque[int] = deque()
        self.idle = list(range(lanes))
        self.current = [-1] * lanes  # prompt a lane has part-done
        self.remaining = [0] * lanes
        self.busy = 0.0  # lane-seconds spent computing


class _DecodeGroup:
    __slots__ = (
        "area",
        "assigned",
        "batch",
        "heap",
        "reserved",
        "sum_input",
        "sum_vjoin",
        "t_last",
        "tau",
        "transferring",
        "v",
        "version",
        "waiting",
    )

    def __init__(self) -> None:
        self.heap: list[tuple[float, int]] = []  # (virtual token count at which it finishes, request)
        self.waiting: deque[int] = deque()
        self.batch = 0
        self.transferring = 0
        self.reserved = 0
        self.assigned = 0  # routed here and not finished: what power-of-two compares
        self.v = 0.0  # virtual clock: tokens each running request has gained since t=0
        self.t_last = 0.0
        self.tau = math.inf  # current iteration time
        self.version = 0  # invalidates scheduled finish events when the batch changes
        self.sum_input = 0
        self.sum_vjoin = 0.0
        self.area = 0.0  # integral of batch over time


def steady_batch(curves: Curves, workload: Workload, rate_per_group: float, context: float, cap: float) -> float:
    """Running requests per decode group in steady state: b = rate x mean output x TPOT(b) (Little's law)."""
    b = 1.0
    demand = rate_per_group * workload.mean_output
    for _ in range(200):
        nxt = demand * curves.tpot(b, context)
        if not nxt < cap:
            return cap
        if abs(nxt - b) < 1e-6 * max(b, 1.0):
            return nxt
        b = nxt
    return b


class _Simulation:
    def __init__(
        self,
        workload: Workload,
        rate: float,
        curves: Curves,
        slo: Slo,
        prefill_groups: int,
        decode_groups: int,
        n_requests: int,
        seed: int,
        arrivals: Arrivals,
        warmup: float,
        prefill_only: bool,
    ) -> None:
        if prefill_groups < 1 or decode_groups < 1:
            raise ValueError("a pool needs at least one prefill and one decode group")
        self.curves, self.slo, self.rate = curves, slo, rate
        self.workload = workload
        self.np_, self.nd = prefill_groups, decode_groups
        self.prefill_only = prefill_only
        rng = np.random.default_rng(seed)
        # Independent streams per purpose, so changing the pool size never reshuffles arrivals or
        # lengths: every configuration sees the same requests (common random numbers), which keeps
        # the search's comparisons between configurations free of sampling noise.
        r_arr, r_len, r_route, r_ghost = (np.random.default_rng(s) for s in rng.integers(0, 2**63, size=4))
        n = n_requests
        if arrivals == "trace":
            gaps = workload.arrival_gaps
            if gaps is None:
                raise ValueError("trace arrivals need a trace with timestamps")
            start = int(r_arr.integers(0, len(gaps)))
            g = np.resize(np.roll(gaps, -start), n)
            g = g * (1.0 / rate) / gaps.mean()
        else:
            g = r_arr.exponential(1.0 / rate, size=n)
        self.arrival = np.cumsum(g).tolist()
        inputs, outputs = workload.sample(n, r_len)
        lanes = curves.lanes
        tput = np.array([curves.prefill_tokens_per_second(x) for x in np.unique(inputs)])
        per_token = dict(zip(np.unique(inputs).tolist(), (lanes / tput).tolist(), strict=True))
        self.inp = inputs.tolist()
        self.out = outputs.tolist()
        self.sec_per_token = [per_token[x] for x in self.inp]  # lane-seconds per prompt token
        self.xfer = [curves.transfer_seconds(x) for x in self.inp]
        # Two random decode candidates per request, drawn up front (power of two choices).
        self.choices = r_route.integers(0, decode_groups, size=(n, 2)).tolist()
        self.warm = int(n * warmup)
        self.n = n
        self.lanes = lanes
        self.chunk = curves.chunk_tokens
        self.max_running = min(curves.max_running_requests, curves.measured_batch)
        self.kv_cap = curves.kv_tokens

        nan = math.nan
        self.prefill_start = [nan] * n
        self.prefill_done = [nan] * n
        self.admitted = [nan] * n
        self.first = [nan] * n
        self.finish = [nan] * n
        self.vjoin = [nan] * n
        self.dgroup = [0] * n

        self.pg = [_PrefillGroup(lanes) for _ in range(prefill_groups)]
        self.work = np.zeros(prefill_groups)  # outstanding group-seconds per prefill group, for routing
        self.dg = [_DecodeGroup() for _ in range(decode_groups)]
        self.events: list[tuple[float, int, int, int, object]] = []
        self.seq = itertools.count()
        self.tpot = curves.tpot_by_integer_batch()
        self.end = self.arrival[-1]
        if not prefill_only:
            self._prepopulate(r_ghost)

    # --- decode state at t=0 -------------------------------------------------------------------
    def _prepopulate(self, rng: np.random.Generator) -> None:
        w = self.workload
        context = w.running_context()
        cap = min(float(self.max_running), self.kv_cap / w.running_reservation())
        b = steady_batch(self.curves, w, self.rate / self.nd, context, cap)
        count = round(b)
        if count == 0:
            return
        ghosts_in, ghosts_out, done = w.sample_running(count * self.nd, rng)
        base = len(self.inp)
        self.inp += ghosts_in.tolist()
        self.out += ghosts_out.tolist()
        extra = count * self.nd
        self.vjoin += (-done).tolist()
        self.first += [0.0] * extra
        self.finish += [math.nan] * extra
        sizes = ghosts_in + ghosts_out
        for k, d in enumerate(self.dg):
            lo = k * count
            fits = int(np.searchsorted(np.cumsum(sizes[lo : lo + count]), self.kv_cap, side="right"))
            n = min(count, self.max_running, fits)
            sl = slice(lo, lo + n)
            d.batch = d.assigned = n
            d.reserved = int(sizes[sl].sum())
            d.sum_input = int(ghosts_in[sl].sum())
            d.sum_vjoin = float(-done[sl].sum())
            d.heap = list(zip((ghosts_out[sl] - done[sl]).tolist(), range(base + lo, base + lo + n), strict=True))
            heapq.heapify(d.heap)
            self._retime(k, 0.0)

    # --- events --------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, a: int, b: object) -> None:
        heapq.heappush(self.events, (t, next(self.seq), kind, a, b))

    def _arrive(self, rid: int, t: float) -> None:
        cost = self.inp[rid] * self.sec_per_token[rid] / self.lanes
        g = int(self.work.argmin()) if self.np_ > 1 else 0
        self.work[g] += cost
        group = self.pg[g]
        group.queue.append(rid)
        if not self.prefill_only:
            c0, c1 = self.choices[rid]
            d = c0 if self.dg[c0].assigned <= self.dg[c1].assigned else c1
            self.dgroup[rid] = d
            self.dg[d].assigned += 1
        if group.idle:
            self._start_step(g, group.idle.pop(), t)

    def _start_step(self, g: int, lane: int, t: float) -> None:
        """Start the lane's next step: its part-done prompt first, then queued prompts up to the budget.

        Consecutive steps a single prompt fills completely take nothing from the queue, so they are
        one event here (the run of full chunks), and only the prompt's last, partial chunk packs in
        queued prompts; the timeline is the same as stepping chunk by chunk.
        """
        group = self.pg[g]
        if group.current[lane] < 0 and not group.queue:
            group.idle.append(lane)
            return
        chunk = self.chunk if self.chunk is not None else 1 << 62  # unchunked: no token budget
        budget = chunk
        duration = 0.0
        done: list[int] = []
        rid = group.current[lane]
        if rid >= 0:
            take = self._take(group.remaining[lane], budget, chunk)
            duration += take * self.sec_per_token[rid]
            budget = budget - take if take < budget else 0
            if take == group.remaining[lane]:
                done.append(rid)
                group.current[lane] = -1
            else:
                group.remaining[lane] -= take
        # Without chunking a step is one whole prompt; with it, the step packs queued prompts.
        while group.queue and budget > 0 and (self.chunk is not None or (group.current[lane] < 0 and not done)):
            rid = group.queue.popleft()
            self.prefill_start[rid] = t
            length = self.inp[rid]
            take = self._take(length, budget, chunk)
            duration += take * self.sec_per_token[rid]
            budget = budget - take if take < budget else 0
            if take == length:
                done.append(rid)
            else:
                group.current[lane] = rid
                group.remaining[lane] = length - take
        # Busy time counts up to the last arrival only, where the measurement ends.
        group.busy += max(0.0, min(duration, self.end - t))
        self._push(t + duration, _STEP_END, g * self.lanes + lane, (done, duration))

    @staticmethod
    def _take(tokens: int, budget: int, chunk: int) -> int:
        """Tokens of a prompt this step computes: all that fit, or a run of whole chunks from an empty step."""
        if tokens <= budget:
            return tokens
        if budget == chunk:
            return tokens - tokens % chunk
        return budget

    def _step_end(self, key: int, payload: tuple[list[int], float], t: float) -> None:
        g, lane = divmod(key, self.lanes)
        done, duration = payload
        self.work[g] -= duration / self.lanes
        for rid in done:
            self.prefill_done[rid] = t
            if not self.prefill_only:
                d = self.dgroup[rid]
                self.dg[d].waiting.append(rid)
                self._admit(d, t)
        self._start_step(g, lane, t)

    def _advance(self, d: _DecodeGroup, t: float) -> None:
        if d.batch:
            dt = t - d.t_last
            d.v += dt / d.tau
            d.area += d.batch * dt
        d.t_last = t

    def _retime(self, k: int, t: float) -> None:
        d = self.dg[k]
        d.version += 1
        if not d.batch:
            d.tau = math.inf
            return
        context = (d.sum_input + d.batch * d.v - d.sum_vjoin) / d.batch
        d.tau = self.tpot(d.batch, context)
        heapq.heappush(self.events, (t + (d.heap[0][0] - d.v) * d.tau, next(self.seq), _DECODE_DUE, k, d.version))

    def _admit(self, k: int, t: float) -> None:
        d = self.dg[k]
        while d.waiting:
            rid = d.waiting[0]
            size = self.inp[rid] + self.out[rid]
            if d.batch + d.transferring >= self.max_running or d.reserved + size > self.kv_cap:
                if d.batch + d.transferring == 0:
                    # A request larger than an empty group's KV cache can never run; the formula's
                    # coverage check rejects such workloads, so this is a modelling error.
                    raise AssertionError(f"request of {size} tokens exceeds the decode group's KV cache")
                return
            d.waiting.popleft()
            d.transferring += 1
            d.reserved += size
            self.admitted[rid] = t
            self._push(t + self.xfer[rid], _XFER_DONE, rid, None)

    def _join(self, rid: int, t: float) -> None:
        k = self.dgroup[rid]
        d = self.dg[k]
        self._advance(d, t)
        d.transferring -= 1
        d.batch += 1
        d.sum_input += self.inp[rid]
        d.sum_vjoin += d.v
        self.vjoin[rid] = d.v
        heapq.heappush(d.heap, (d.v + self.out[rid], rid))
        self._retime(k, t)
        self.first[rid] = t + d.tau

    def _decode_due(self, k: int, version: int, t: float) -> None:
        d = self.dg[k]
        if version != d.version:
            return
        self._advance(d, t)
        heap = d.heap
        while heap and heap[0][0] <= d.v + 1e-9:
            _, rid = heapq.heappop(heap)
            self.finish[rid] = t
            d.batch -= 1
            d.assigned -= 1
            d.reserved -= self.inp[rid] + self.out[rid]
            d.sum_input -= self.inp[rid]
            d.sum_vjoin -= self.vjoin[rid]
        if not d.batch:
            # Re-anchor the virtual clock so float error cannot build up across idle periods.
            d.v, d.sum_vjoin = 0.0, 0.0
        self._admit(k, t)
        self._retime(k, t)

    # --- run -----------------------------------------------------------------------------------
    def run(self) -> SimResult:
        wall = time.perf_counter()
        events = self.events
        arrival = self.arrival
        end = self.end
        nxt = 0
        n = self.n
        pop = heapq.heappop
        arrive, step_end, join, decode_due = self._arrive, self._step_end, self._join, self._decode_due
        while True:
            if nxt < n and (not events or arrival[nxt] <= events[0][0]):
                arrive(nxt, arrival[nxt])
                nxt += 1
                continue
            if not events or events[0][0] > end:
                break
            t, _, kind, a, b = pop(events)
            if kind == _STEP_END:
                step_end(a, b, t)  # type: ignore[arg-type]
            elif kind == _XFER_DONE:
                join(a, t)
            else:
                decode_due(a, b, t)  # type: ignore[arg-type]
        for d in self.dg:
            self._advance(d, end)
        return self._measure(end, time.perf_counter() - wall)

    def _measure(self, end: float, wall: float) -> SimResult:
        slo = self.slo
        lo = self.warm
        arrival = np.array(self.arrival[lo:])
        out = np.array(self.out[lo : self.n])
        inp = np.array(self.inp[lo : self.n])
        # Prefill only: the pool ends at the prefill, whose end stands in for the first token.
        first = np.array(self.prefill_done[lo:] if self.prefill_only else self.first[lo : self.n])
        finish = np.array(self.finish[lo : self.n])
        vjoin = np.array(self.vjoin[lo : self.n])
        v_end = np.array([self.dg[k].v for k in self.dgroup[lo:]])

        has_first = first <= end
        ttft = np.where(has_first, first - arrival, end - arrival)
        ttft_known = has_first | (ttft > slo.ttft_seconds)
        ttft_ok = has_first & (ttft <= slo.ttft_seconds)

        # TPOT: finished requests exactly; running ones over the iterations since their first token,
        # counted on the group's virtual clock (fractional, so a part-done iteration is not a token).
        finished = finish <= end
        after_first = np.where(finished, out - 1, v_end - vjoin - 1)
        last = np.where(finished, finish, end)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(after_first >= 1, (last - first) / after_first, np.nan)
        single = out == 1
        tpot_known = self.prefill_only | single | (has_first & (after_first >= 1))
        tpot_ok = self.prefill_only | single | (has_first & (tpot <= slo.tpot_seconds))

        both_known = (ttft_known & tpot_known) | (ttft_known & ~ttft_ok) | (tpot_known & ~tpot_ok)
        both_ok = ttft_ok & tpot_ok

        def frac(ok: np.ndarray, known: np.ndarray) -> float:
            total = int(known.sum())
            return float((ok & known).sum() / total) if total else 0.0

        good = both_ok & both_known
        # Goodput: the arrival rate times the share within both SLOs (censored requests excluded from
        # both), so requests still in flight at the end do not count as lost.
        attainment = frac(both_ok, both_known)
        good_tokens = float((inp[good] + out[good]).mean()) if good.any() else 0.0
        started = np.array(self.prefill_start[lo:])
        waits = started - arrival
        adm = np.array(self.admitted[lo : self.n]) - np.array(self.prefill_done[lo:])
        real_tpot = tpot[~np.isnan(tpot) & ~single]
        real_ttft = ttft[has_first]
        lanes_total = len(self.pg) * self.lanes
        return SimResult(
            prefill_groups=self.np_,
            decode_groups=self.nd,
            rate_rps=self.rate,
            requests=int(ttft_known.sum()),
            attainment_ttft=frac(ttft_ok, ttft_known),
            attainment_tpot=frac(tpot_ok, tpot_known),
            attainment=attainment,
            goodput_rps=self.rate * attainment,
            goodput_tokens_per_s=self.rate * attainment * good_tokens,
            ttft_p50=_pct(real_ttft, 50),
            ttft_p99=_pct(real_ttft, 99),
            tpot_p50=_pct(real_tpot, 50),
            tpot_p99=_pct(real_tpot, 99),
            mean_prefill_wait=float(np.nanmean(waits)) if np.isfinite(waits).any() else math.nan,
            mean_admission_wait=float(np.nanmean(adm)) if np.isfinite(adm).any() else 0.0,
            prefill_busy=sum(g.busy for g in self.pg) / (lanes_total * end) if end > 0 else 0.0,
            mean_decode_batch=sum(d.area for d in self.dg) / (len(self.dg) * end) if end > 0 else 0.0,
            simulated_seconds=end,
            arrivals=self.n,
            wall_seconds=wall,
        )


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def simulate(
    workload: Workload,
    rate: float,
    curves: Curves,
    slo: Slo,
    prefill_groups: int,
    decode_groups: int,
    n_requests: int = 20_000,
    seed: int = 0,
    arrivals: Arrivals = "poisson",
    warmup: float = 0.05,
    prefill_only: bool = False,
) -> SimResult:
    """Simulate ``n_requests`` arrivals at ``rate`` req/s on the given pool sizes.

    ``prefill_only`` stops each request at the end of its prefill (TTFT := prefill done): the pool
    as a plain queueing system, for checking the simulator against queueing theory.
    """
    if rate <= 0:
        raise ValueError("rate must be > 0")
    if n_requests < 2:
        raise ValueError("simulate at least two requests")
    started = time.perf_counter()
    sim = _Simulation(workload, rate, curves, slo, prefill_groups, decode_groups, n_requests, seed, arrivals, warmup, prefill_only)
    return replace(sim.run(), wall_seconds=time.perf_counter() - started)
