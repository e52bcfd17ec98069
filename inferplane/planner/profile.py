"""Capacity profiles: what one prefill group and one decode group can do, measured, with provenance.

A profile is a YAML file (``profiles/*.yaml``) holding curves measured on one group shape:

- prefill: saturated prompt tokens/s per group against input length, and p99 TTFT (queue + prefill,
  at the prefill server) against input length and load (fraction of saturated throughput);
- decode: time per output token (one decode iteration) against running batch and mean context,
  which also gives decode throughput (batch / TPOT generated tokens/s);
- the decode group's KV capacity and max running requests, and the KV transfer cost between them.

The planner never extrapolates a curve past what was measured: an input longer than the longest
measured prefill, or a context longer than the longest measured decode context, is an error that
says what to measure. Below the measured range the curves are held flat.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferplane.errors import ConfigError, format_validation_error, join_problems
from inferplane.planner.workload import read_yaml_mapping

# A hand-entered TTFT may undercut the compute time its own throughput and lanes imply by this much
# (rounding); more than that and the profile contradicts itself.
TTFT_CONSISTENCY_SLACK = 0.10


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Provenance(_Strict):
    source: Literal["benchmark", "hand-entered"] = Field(description="benchmark: written by the benchmark runner; hand-entered: typed in")
    date: dt.date
    hardware: str = Field(min_length=1, description="GPU, count per node, interconnect")
    model: str = Field(min_length=1, description="model and precision, e.g. deepseek-v3 FP8")
    engine: str = Field(min_length=1, description="serving engine and version, e.g. sglang 0.5.23")
    notes: str = ""
    references: tuple[str, ...] = ()


class GroupShape(_Strict):
    """The group the curves were measured on; it must match the stack's pool to be used for it."""

    nodes_per_group: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1, le=16)
    tp: int = Field(ge=1)
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)

    @property
    def gpus(self) -> int:
        return self.nodes_per_group * self.gpus_per_node

    def text(self) -> str:
        return f"{self.nodes_per_group}x{self.gpus_per_node} GPUs, tp {self.tp} dp {self.dp} ep {self.ep}"


def _increasing(name: str, values: Sequence[float], positive: bool = True) -> list[str]:
    problems = []
    if positive and any(v <= 0 for v in values):
        problems.append(f"{name}: every value must be > 0 (got {list(values)})")
    if any(b <= a for a, b in itertools.pairwise(values)):
        problems.append(f"{name}: must be strictly increasing (got {list(values)})")
    return problems


def _grid(rows_name: str, rows: Sequence[float], cols_name: str, cols: Sequence[float], seconds: Sequence[Sequence[float]]) -> list[str]:
    """Shape and sign of a measured grid: one row per ``rows`` value, one column per ``cols`` value."""
    problems = []
    if len(seconds) != len(rows):
        problems.append(f"seconds: {len(seconds)} rows for {len(rows)} {rows_name} values; one row per {rows_name} value")
        return problems
    for i, row in enumerate(seconds):
        if len(row) != len(cols):
            problems.append(f"seconds[{i}]: {len(row)} values for {len(cols)} {cols_name} values; one value per {cols_name} value")
        elif any(v <= 0 for v in row):
            problems.append(f"seconds[{i}]: every value must be > 0 (got {list(row)})")
        elif any(b < a for a, b in itertools.pairwise(row)):
            problems.append(
                f"seconds[{i}]: falls as {cols_name} rises (got {list(row)}); a measured curve here never falls, fix the outlier"
            )
    return problems


class Throughput(_Strict):
    input_tokens: tuple[int, ...] = Field(min_length=1)
    tokens_per_second: tuple[float, ...] = Field(min_length=1, description="saturated prompt tokens/s of the whole group")

    @model_validator(mode="after")
    def _shape(self) -> Throughput:
        problems = _increasing("input_tokens", self.input_tokens)
        if len(self.tokens_per_second) != len(self.input_tokens):
            problems.append(
                f"tokens_per_second: {len(self.tokens_per_second)} values for {len(self.input_tokens)} input lengths; one per input length"
            )
        elif any(v <= 0 for v in self.tokens_per_second):
            problems.append("tokens_per_second: every value must be > 0")
        if problems:
            raise ValueError(join_problems(problems))
        return self


class TtftGrid(_Strict):
    input_tokens: tuple[int, ...] = Field(min_length=1)
    load: tuple[float, ...] = Field(min_length=1, description="offered prompt tokens/s as a fraction of saturated throughput")
    seconds: tuple[tuple[float, ...], ...] = Field(description="p99 TTFT; one row per input length, one column per load")

    @model_validator(mode="after")
    def _shape(self) -> TtftGrid:
        problems = _increasing("input_tokens", self.input_tokens) + _increasing("load", self.load)
        if any(v > 1 for v in self.load):
            problems.append(f"load: fractions of saturated throughput, at most 1 (got {list(self.load)})")
        problems += _grid("input_tokens", self.input_tokens, "load", self.load, self.seconds)
        if problems:
            raise ValueError(join_problems(problems))
        return self


class TpotGrid(_Strict):
    context_tokens: tuple[int, ...] = Field(min_length=1, description="mean context (prompt + generated) of the running batch")
    batch: tuple[int, ...] = Field(min_length=1, description="running requests in the group")
    seconds: tuple[tuple[float, ...], ...] = Field(description="one decode iteration; one row per context, one column per batch")

    @model_validator(mode="after")
    def _shape(self) -> TpotGrid:
        problems = _increasing("context_tokens", self.context_tokens) + _increasing("batch", self.batch)
        problems += _grid("context_tokens", self.context_tokens, "batch", self.batch, self.seconds)
        if not problems:
            for j in range(len(self.batch)):
                column = [row[j] for row in self.seconds]
                if any(b < a for a, b in itertools.pairwise(column)):
                    problems.append(f"seconds: batch {self.batch[j]} gets faster as context grows (got {column}); fix the outlier")
        if problems:
            raise ValueError(join_problems(problems))
        return self


class PrefillProfile(_Strict):
    group: GroupShape
    lanes: int = Field(
        default=1,
        ge=1,
        description="requests one group prefills at once (e.g. DP-attention ranks at work); each gets 1/lanes of the throughput",
    )
    chunk_tokens: int | None = Field(default=None, ge=1, description="chunked prefill budget per step and lane; null: whole requests")
    throughput: Throughput
    ttft_p99_seconds: TtftGrid

    @model_validator(mode="after")
    def _consistent(self) -> PrefillProfile:
        problems = []
        lo, hi = self.throughput.input_tokens[0], self.throughput.input_tokens[-1]
        curve = _Interp1(self.throughput.input_tokens, self.throughput.tokens_per_second, log_x=True)
        for i, length in enumerate(self.ttft_p99_seconds.input_tokens):
            if length > hi:
                problems.append(f"ttft_p99_seconds.input_tokens: {length} is beyond the longest measured throughput ({hi}); measure it")
                continue
            compute = length / (curve(max(length, lo)) / self.lanes)
            floor = self.ttft_p99_seconds.seconds[i][0]
            if floor < compute * (1 - TTFT_CONSISTENCY_SLACK):
                problems.append(
                    f"ttft_p99_seconds.seconds[{i}]: {floor} s at {length} tokens is faster than the prefill itself "
                    f"({compute:.3f} s = {length} tokens at {curve(max(length, lo)):.0f}/{self.lanes} tokens/s per lane); "
                    "fix throughput, lanes or the TTFT"
                )
        if problems:
            raise ValueError(join_problems(problems))
        return self


class DecodeProfile(_Strict):
    group: GroupShape
    max_running_requests: int = Field(ge=1, description="the engine's --max-running-requests when measured")
    kv_tokens: int = Field(ge=1, description="KV cache capacity of the whole group in tokens (max_total_num_tokens summed over ranks)")
    tpot_seconds: TpotGrid


class KvTransfer(_Strict):
    bytes_per_token: int = Field(ge=1, description="KV bytes per prompt token moved prefill -> decode")
    gbytes_per_second: float = Field(gt=0, description="achieved bandwidth of one request's transfer, GB/s (1e9 bytes)")
    latency_seconds: float = Field(ge=0, description="fixed cost per transfer (bootstrap, allocation)")

    def seconds(self, input_tokens: float) -> float:
        return self.latency_seconds + input_tokens * self.bytes_per_token / (self.gbytes_per_second * 1e9)


class Profile(_Strict):
    schema_version: Literal[1]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    provenance: Provenance
    prefill: PrefillProfile
    decode: DecodeProfile
    kv_transfer: KvTransfer

    def coverage_problems(self, max_input: int, max_context: int) -> list[str]:
        """What a workload needs that this profile did not measure."""
        problems = []
        longest = self.prefill.throughput.input_tokens[-1]
        if max_input > longest:
            problems.append(
                f"prefill.throughput.input_tokens: the workload has {max_input}-token prompts, the profile measured up to {longest}; "
                "measure longer prompts (the planner does not extrapolate)"
            )
        ttft_longest = self.prefill.ttft_p99_seconds.input_tokens[-1]
        if max_input > ttft_longest:
            problems.append(
                f"prefill.ttft_p99_seconds.input_tokens: the workload has {max_input}-token prompts, TTFT was measured up to "
                f"{ttft_longest}; measure TTFT for longer prompts"
            )
        context = self.decode.tpot_seconds.context_tokens[-1]
        if max_context > context:
            problems.append(
                f"decode.tpot_seconds.context_tokens: the workload reaches {max_context} tokens of context, the profile measured up to "
                f"{context}; measure longer contexts (the planner does not extrapolate)"
            )
        return problems


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), ["--profile: no such file; pass a profile YAML such as profiles/h200-deepseek-v3.yaml"])
    doc = read_yaml_mapping(p, "profile", "schema_version, name, provenance, ...")
    try:
        return Profile.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(str(p), format_validation_error(exc)) from None


# --- curves -----------------------------------------------------------------------------------
# Plain Python with bisect: the simulator calls these once per event, where numpy's per-call
# overhead would dominate.


class _Interp1:
    """Piecewise-linear y(x), flat below the first point; x past the last point is the caller's problem."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], log_x: bool = False) -> None:
        self.log_x = log_x
        self.xs = [math.log2(x) if log_x else float(x) for x in xs]
        self.ys = [float(y) for y in ys]

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if self.log_x:
            x = math.log2(x) if x > 0 else xs[0]
        if x <= xs[0] or len(xs) == 1:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, x) - 1
        f = (x - xs[i]) / (xs[i + 1] - xs[i])
        return ys[i] + f * (ys[i + 1] - ys[i])


class _Interp2:
    """Bilinear z(row, col) on a measured grid; flat below both axes, ``inf`` past the last column."""

    def __init__(self, rows: Sequence[float], cols: Sequence[float], z: Sequence[Sequence[float]], log_rows: bool = False) -> None:
        self.log_rows = log_rows
        self.rows = [math.log2(r) if log_rows else float(r) for r in rows]
        self.cols = [float(c) for c in cols]
        self.z = [[float(v) for v in row] for row in z]

    @staticmethod
    def _locate(axis: list[float], x: float) -> tuple[int, float]:
        if len(axis) == 1 or x <= axis[0]:
            return 0, 0.0
        if x >= axis[-1]:
            return len(axis) - 2, 1.0
        i = bisect.bisect_right(axis, x) - 1
        return i, (x - axis[i]) / (axis[i + 1] - axis[i])

    def __call__(self, row: float, col: float) -> float:
        if col > self.cols[-1] * (1 + 1e-9):
            return math.inf
        if self.log_rows:
            row = math.log2(row) if row > 0 else self.rows[0]
        i, fr = self._locate(self.rows, row)
        j, fc = self._locate(self.cols, col)
        z = self.z
        if len(self.rows) == 1:
            r0 = r1 = z[0]
        else:
            r0, r1 = z[i], z[i + 1]
        if len(self.cols) == 1:
            return r0[0] + fr * (r1[0] - r0[0])
        a = r0[j] + fc * (r0[j + 1] - r0[j])
        b = r1[j] + fc * (r1[j + 1] - r1[j])
        return a + fr * (b - a)


class Curves:
    """The profile as functions the formula and the simulator evaluate."""

    def __init__(self, profile: Profile, max_running_requests: int | None = None) -> None:
        self.profile = profile
        pf, dc = profile.prefill, profile.decode
        self.lanes = pf.lanes
        self.chunk_tokens = pf.chunk_tokens
        self._throughput = _Interp1(pf.throughput.input_tokens, pf.throughput.tokens_per_second, log_x=True)
        self._ttft = _Interp2(pf.ttft_p99_seconds.input_tokens, pf.ttft_p99_seconds.load, pf.ttft_p99_seconds.seconds, log_rows=True)
        self._tpot = _Interp2(dc.tpot_seconds.context_tokens, dc.tpot_seconds.batch, dc.tpot_seconds.seconds)
        # The stack's setting wins over the one the profile was measured with: it is what will run.
        self.max_running_requests = max_running_requests or dc.max_running_requests
        self.measured_batch = dc.tpot_seconds.batch[-1]
        self.kv_tokens = dc.kv_tokens
        self.kv = profile.kv_transfer

    def prefill_tokens_per_second(self, input_tokens: float) -> float:
        """Saturated prompt tokens/s of a whole group on prompts of this length."""
        return self._throughput(input_tokens)

    def prefill_seconds(self, input_tokens: float) -> float:
        """Group-seconds of prefill work one prompt costs (its service time on one of ``lanes`` lanes is ``lanes`` times this)."""
        return input_tokens / self._throughput(input_tokens)

    def ttft_p99(self, input_tokens: float, load: float) -> float:
        """Measured p99 TTFT at the prefill server; ``inf`` above the highest measured load."""
        return self._ttft(input_tokens, load)

    def tpot(self, batch: float, context_tokens: float) -> float:
        """One decode iteration; ``inf`` above the largest measured batch."""
        return self._tpot(context_tokens, max(batch, 1.0))

    def transfer_seconds(self, input_tokens: float) -> float:
        return self.kv.seconds(input_tokens)

    def tpot_by_integer_batch(self) -> Callable[[int, float], float]:
        """``tpot`` for whole batches 1..largest measured, from a per-batch table: the simulator's hot path.

        Equal to ``tpot`` at integer batches (linear along batch, then along context); a batch past
        the measured range raises IndexError, which the simulator's admission control rules out.
        """
        grid = self.profile.decode.tpot_seconds
        batches = np.maximum(np.arange(grid.batch[-1] + 1), 1)
        rows = [np.interp(batches, grid.batch, row).tolist() for row in grid.seconds]
        ctx = [float(c) for c in grid.context_tokens]
        first, last, right = rows[0], rows[-1], bisect.bisect_right

        def tpot(batch: int, context: float) -> float:
            if context <= ctx[0]:
                return first[batch]
            if context >= ctx[-1]:
                return last[batch]
            j = right(ctx, context) - 1
            a = rows[j][batch]
            return a + (context - ctx[j]) / (ctx[j + 1] - ctx[j]) * (rows[j + 1][batch] - a)

        return tpot
