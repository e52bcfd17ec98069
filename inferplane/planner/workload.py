"""Workloads: the joint distribution of (input, output) token lengths, plus how requests arrive.

A workload is what the planner sizes for: a request rate and the token lengths each request
brings. Lengths are one joint empirical distribution of (input, output) pairs with weights, so a
fixed workload (one pair), a hand-written histogram (a YAML file) and a recorded trace (a JSONL
file, one request per line) are the same object; keeping the pairs joint keeps the correlation a
trace has between long prompts and short answers, which the prefill and decode pools both feel.

Sources, chosen by ``load_workload(name_or_path)``:
- the four seed workloads ``chat``, ``code``, ``rag``, ``long`` (issue 10), each with the SLOs of the
  business pool it stands for;
- ``*.jsonl``: a trace, ``{"input_tokens": N, "output_tokens": M, "timestamp": S}`` per line
  (``timestamp`` in seconds, optional; when every line has one, the trace's arrival pattern can
  be replayed with ``--arrivals trace``);
- ``*.yaml``/``*.yml``: a histogram, see ``WorkloadFile``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferplane.errors import ConfigError, format_validation_error

# A trace's bad lines are reported one per line; past this many the rest are counted, not listed.
MAX_LISTED_PROBLEMS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Slo(_Strict):
    """Per-request service-level objectives the plan must hold for ``target`` of the requests."""

    ttft_seconds: float = Field(gt=0, description="time to first token, arrival to first token at the client")
    tpot_seconds: float = Field(gt=0, description="time per output token after the first, averaged over the request")


class HistogramBin(_Strict):
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    share: float = Field(gt=0, description="relative weight; shares need not sum to 1")
    label: str | None = Field(default=None, description="what this bin stands for, e.g. chat")


class WorkloadFile(_Strict):
    """A workload written by hand: a joint (input, output) histogram and, optionally, its SLOs.

    ```yaml
    schema_version: 1
    name: prod-mix
    description: interactive pool, business mix
    slo: {ttft_seconds: 3.0, tpot_seconds: 0.08}
    requests:
      - {input_tokens: 2048, output_tokens: 1024, share: 0.6, label: chat}
      - {input_tokens: 8192, output_tokens: 2048, share: 0.4, label: code}
    ```
    """

    schema_version: Literal[1]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    slo: Slo | None = None
    requests: tuple[HistogramBin, ...]

    @model_validator(mode="after")
    def _not_empty(self) -> WorkloadFile:
        if not self.requests:
            raise ValueError("@requests: empty; list at least one {input_tokens, output_tokens, share} bin")
        return self


class TraceRecord(_Strict):
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    timestamp: float | None = Field(default=None, ge=0, description="arrival time in seconds")

    @model_validator(mode="after")
    def _finite(self) -> TraceRecord:
        if self.timestamp is not None and not np.isfinite(self.timestamp):
            raise ValueError("@timestamp: must be a finite number of seconds")
        return self


@dataclass(frozen=True, eq=False)
class Workload:
    """Joint (input, output) length distribution, normalised weights, optional trace arrival gaps."""

    name: str
    inputs: np.ndarray  # int64, one entry per distinct (input, output) pair
    outputs: np.ndarray  # int64
    probs: np.ndarray  # float64, sums to 1
    description: str = ""
    slo: Slo | None = None
    arrival_gaps: np.ndarray | None = None  # seconds between consecutive trace arrivals, in trace order
    source: str = "seed"

    @property
    def mean_input(self) -> float:
        return float(self.probs @ self.inputs)

    @property
    def mean_output(self) -> float:
        return float(self.probs @ self.outputs)

    @property
    def max_input(self) -> int:
        return int(self.inputs.max())

    @property
    def max_context(self) -> int:
        return int((self.inputs + self.outputs).max())

    def expect(self, values: np.ndarray) -> float:
        """Mean of per-pair ``values`` over the distribution."""
        return float(self.probs @ values)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.choice(len(self.probs), size=n, p=self.probs) if len(self.probs) > 1 else np.zeros(n, dtype=np.int64)
        return self.inputs[idx], self.outputs[idx]

    def sample_running(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` requests as a snapshot of a decode batch in steady state would hold them.

        A request is in the batch for a time proportional to its output length, so the batch holds
        long answers more often than they arrive (length-biased), each at a uniformly random point
        of its answer. Returns inputs, outputs, tokens generated so far.
        """
        biased = self.probs * self.outputs
        biased = biased / biased.sum()
        idx = rng.choice(len(biased), size=n, p=biased) if len(biased) > 1 else np.zeros(n, dtype=np.int64)
        outputs = self.outputs[idx]
        done = np.floor(rng.random(n) * outputs)
        return self.inputs[idx], outputs, done

    def running_context(self) -> float:
        """Mean context (prompt + tokens generated so far) of a request in a steady-state decode batch."""
        mo = self.mean_output
        return self.expect(self.inputs * self.outputs) / mo + self.expect(self.outputs.astype(float) ** 2) / (2 * mo)

    def running_reservation(self) -> float:
        """Mean KV tokens a request in a steady-state decode batch holds reserved (prompt + whole answer)."""
        return self.expect((self.inputs + self.outputs) * self.outputs) / self.mean_output

    def describe(self) -> str:
        if len(self.probs) == 1:
            return f"{int(self.inputs[0])} in / {int(self.outputs[0])} out, fixed"
        kind = "trace" if self.source == "trace" else "histogram"
        return f"mean {self.mean_input:.0f} in / {self.mean_output:.0f} out, {kind} of {len(self.probs)} distinct pairs"


def _from_pairs(name: str, inputs: np.ndarray, outputs: np.ndarray, weights: np.ndarray, **kw: object) -> Workload:
    # Collapse repeated pairs: a million-line trace of a few thousand distinct pairs keeps the
    # formula's expectations and the sampler cheap.
    pairs = np.stack([inputs.astype(np.int64), outputs.astype(np.int64)], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    w = np.bincount(inverse.ravel(), weights=weights.astype(float))
    return Workload(name=name, inputs=uniq[:, 0].copy(), outputs=uniq[:, 1].copy(), probs=w / w.sum(), **kw)  # type: ignore[arg-type]


def fixed(name: str, input_tokens: int, output_tokens: int, slo: Slo | None = None, description: str = "") -> Workload:
    return _from_pairs(name, np.array([input_tokens]), np.array([output_tokens]), np.array([1.0]), slo=slo, description=description)


def empirical(name: str, inputs: np.ndarray, outputs: np.ndarray, weights: np.ndarray | None = None, **kw: object) -> Workload:
    """A workload from samples (e.g. a trace), optionally weighted."""
    w = np.ones(len(inputs)) if weights is None else np.asarray(weights, dtype=float)
    return _from_pairs(name, np.asarray(inputs), np.asarray(outputs), w, **kw)


# The four seed workloads of issue 10. "K" is 1024 tokens. Their SLOs are the planning defaults of the
# business pool each stands for: interactive chat and code want a fast first token and a reading-speed
# stream; RAG tolerates a longer first token for its 32K context; long-context analysis is near-batch.
SEEDS: dict[str, Workload] = {
    "chat": fixed("chat", 2048, 1024, Slo(ttft_seconds=2.0, tpot_seconds=0.05), "interactive chat, 2K in / 1K out"),
    "code": fixed("code", 8192, 2048, Slo(ttft_seconds=3.0, tpot_seconds=0.05), "code assistant, 8K in / 2K out"),
    "rag": fixed("rag", 32768, 1024, Slo(ttft_seconds=4.0, tpot_seconds=0.08), "retrieval-augmented answers, 32K in / 1K out"),
    "long": fixed("long", 131072, 512, Slo(ttft_seconds=30.0, tpot_seconds=0.1), "long-context analysis, 128K in / 512 out"),
}


def load_trace(path: Path) -> Workload:
    """A JSONL trace: one request per line; blank lines and ``#`` comments are skipped."""
    problems: list[str] = []
    records: list[TraceRecord] = []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"(file): cannot read the trace ({exc})"]) from None
    extra = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            records.append(TraceRecord.model_validate(json.loads(line)))
            continue
        except json.JSONDecodeError as exc:
            found = [f"line {lineno}: not JSON ({exc.msg}); one JSON object per line"]
        except ValidationError as exc:
            found = [f"line {lineno}: {p}" for p in format_validation_error(exc)]
        if len(problems) < MAX_LISTED_PROBLEMS:
            problems.extend(found)
        else:
            extra += len(found)
    if extra:
        problems.append(f"... and {extra} more problem(s) like these")
    if not problems and not records:
        problems.append('(file): no requests; one JSON object per line: {"input_tokens": N, "output_tokens": M}')
    stamped = [r.timestamp is not None for r in records]
    if records and any(stamped) and not all(stamped):
        problems.append(f"timestamp: {stamped.count(True)} of {len(records)} lines have one; give every line a timestamp or none")
    if problems:
        raise ConfigError(str(path), problems)
    inputs = np.array([r.input_tokens for r in records])
    outputs = np.array([r.output_tokens for r in records])
    gaps = None
    if records and all(stamped):
        times = np.sort(np.array([r.timestamp for r in records], dtype=float))
        gaps = np.diff(times)
        if len(gaps) == 0 or gaps.sum() <= 0:
            raise ConfigError(str(path), ["timestamp: all requests share one timestamp; the trace has no arrival pattern to replay"])
    return empirical(
        path.stem, inputs, outputs, arrival_gaps=gaps, source="trace", description=f"trace {path.name}, {len(records)} requests"
    )


def read_yaml_mapping(path: Path, what: str, keys: str) -> dict:
    """A planner input file as a mapping, or one ConfigError line saying what is wrong with it."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"(file): cannot read the {what} ({exc})"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(document): not valid YAML ({str(exc).splitlines()[0]}); fix the syntax"]) from None
    if not isinstance(doc, dict):
        raise ConfigError(str(path), [f"(document): expected a mapping with {keys} (got {type(doc).__name__})"])
    return doc


def load_workload_file(path: Path) -> Workload:
    doc = read_yaml_mapping(path, "workload", "schema_version, name, requests")
    try:
        wf = WorkloadFile.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(str(path), format_validation_error(exc)) from None
    return empirical(
        wf.name,
        np.array([b.input_tokens for b in wf.requests]),
        np.array([b.output_tokens for b in wf.requests]),
        np.array([b.share for b in wf.requests]),
        slo=wf.slo,
        description=wf.description,
        source="histogram",
    )


def load_workload(spec: str) -> Workload:
    """A seed name, a ``.jsonl`` trace or a ``.yaml`` histogram."""
    if spec in SEEDS:
        return SEEDS[spec]
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(
            "--workload", [f"--workload: '{spec}' is neither a seed workload ({', '.join(SEEDS)}) nor a file; pass a name or a path"]
        )
    if path.suffix == ".jsonl":
        return load_trace(path)
    if path.suffix in (".yaml", ".yml"):
        return load_workload_file(path)
    raise ConfigError(str(path), ["(file): unknown workload format; use .jsonl (a trace) or .yaml (a histogram)"])


def with_slo(workload: Workload, slo: Slo) -> Workload:
    return replace(workload, slo=slo)
