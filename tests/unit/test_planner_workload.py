"""Workloads: seeds, traces and histograms become one joint (input, output) distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferplane.errors import ConfigError
from inferplane.planner.workload import SEEDS, empirical, fixed, load_workload


def test_seed_workloads_are_the_four_of_issue_10() -> None:
    lengths = {n: (int(w.inputs[0]), int(w.outputs[0])) for n, w in SEEDS.items()}
    assert lengths == {"chat": (2048, 1024), "code": (8192, 2048), "rag": (32768, 1024), "long": (131072, 512)}
    assert all(w.slo is not None for w in SEEDS.values())


def test_trace_keeps_pairs_joint_and_collapses_repeats(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = ['{"input_tokens": 100, "output_tokens": 900}'] * 3 + ['{"input_tokens": 900, "output_tokens": 100}', "# comment", ""]
    path.write_text("\n".join(lines))
    w = load_workload(str(path))
    assert sorted(zip(w.inputs.tolist(), w.outputs.tolist(), w.probs.tolist(), strict=True)) == [(100, 900, 0.75), (900, 100, 0.25)]
    assert w.arrival_gaps is None and w.mean_input == pytest.approx(300)


def test_trace_timestamps_must_be_all_or_none(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"input_tokens": 1, "output_tokens": 1, "timestamp": 0.5}\n{"input_tokens": 1, "output_tokens": 1}\n')
    with pytest.raises(ConfigError) as exc:
        load_workload(str(path))
    assert exc.value.problems == ["timestamp: 1 of 2 lines have one; give every line a timestamp or none"]


def test_trace_timestamps_give_arrival_gaps_in_time_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    stamps = [3.0, 0.0, 1.0, 1.5]
    path.write_text("\n".join(f'{{"input_tokens": 10, "output_tokens": 2, "timestamp": {t}}}' for t in stamps))
    w = load_workload(str(path))
    assert w.arrival_gaps is not None and w.arrival_gaps.tolist() == [1.0, 0.5, 1.5]


def test_histogram_file_with_shares(tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text(
        "schema_version: 1\nname: mix\nslo: {ttft_seconds: 3, tpot_seconds: 0.08}\nrequests:\n"
        "  - {input_tokens: 2048, output_tokens: 1024, share: 3, label: chat}\n"
        "  - {input_tokens: 8192, output_tokens: 2048, share: 1, label: code}\n"
    )
    w = load_workload(str(path))
    assert w.mean_input == pytest.approx(0.75 * 2048 + 0.25 * 8192)
    assert w.slo is not None and w.slo.tpot_seconds == 0.08


def test_empty_histogram_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text("schema_version: 1\nname: mix\nrequests: []\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(str(path))
    assert exc.value.problems == ["requests: empty; list at least one {input_tokens, output_tokens, share} bin"]


def test_running_batch_is_length_biased() -> None:
    # Half the requests answer 10 tokens, half 990: a decode batch holds the long ones 99 times as often.
    w = empirical("bimodal", np.array([100, 100]), np.array([10, 990]))
    _, outputs, done = w.sample_running(100_000, np.random.default_rng(0))
    assert np.mean(outputs == 990) == pytest.approx(0.99, abs=0.003)
    assert np.all(done < outputs)
    # Mean context in the batch: E[L O]/E[O] + E[O^2]/(2 E[O]), with E[O] = 500.
    assert w.running_context() == pytest.approx(100 + (0.5 * 10**2 + 0.5 * 990**2) / (2 * 500))


def test_fixed_workload_running_context_is_prompt_plus_half_the_answer() -> None:
    assert fixed("f", 1000, 100).running_context() == pytest.approx(1050)
    assert fixed("f", 1000, 100).running_reservation() == pytest.approx(1100)
