"""`inferplane plan pd`: bad input is one line per problem and exit 2; --write-stack is a reviewed diff."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from inferplane.cli import main
from inferplane.errors import ConfigError
from inferplane.planner.stackfile import update_pool_fields
from inferplane.spec import STACKS_DIR, load_stack
from tests.conftest import REPO_ROOT
from tests.unit.planner_profiles import hand_profile

PROFILE = str(REPO_ROOT / "profiles" / "h200-deepseek-v3.yaml")
FAST = ["--requests", "3000"]


def plan_pd(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", "pd", *args])
    out, err = capsys.readouterr()
    return code, out, err


def problems_of(err: str) -> list[str]:
    """The indented problem lines under the ConfigError header; no traceback anywhere."""
    assert "Traceback" not in err
    head, *lines = err.strip().splitlines()
    assert head.endswith(f"{len(lines)} problem(s)"), err
    return [line.strip() for line in lines]


def write_profile(tmp_path: Path, doc: dict) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_text_output_names_groups_ratio_binding_cost_and_attainment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan_pd(capsys, "--workload", "chat", "--rate", "100", "--profile", PROFILE, "--gpu-price", "3.5", *FAST)
    assert code == 0
    assert "prefill " in out and "decode " in out and "P:D ratio" in out
    assert "per 1M tokens" in out and "within both SLOs" in out
    assert "max running requests" in out  # decode's binding constraint for chat on this profile


def test_json_output_is_consistent(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan_pd(capsys, "--workload", "rag", "--rate", "20", "--profile", PROFILE, "--json", "--gpu-price", "2", *FAST)
    assert code == 0
    r = json.loads(out)
    p, d = r["pools"]["prefill"], r["pools"]["decode"]
    assert r["gpus"] == p["groups"] * 16 + d["groups"] * 32
    assert r["ratio"]["groups"] == pytest.approx(p["groups"] / d["groups"], abs=1e-3)
    assert r["simulation"]["attainment"] >= r["target"]
    assert d["binds"] == "KV cache"
    assert r["cost"]["per_hour_usd"] == pytest.approx(r["gpus"] * 2)
    assert r["slo"] == {"ttft_seconds": 4.0, "tpot_seconds": 0.08}  # the rag seed's own SLOs


def test_unknown_workload_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_pd(capsys, "--workload", "chatt", "--rate", "1", "--profile", PROFILE)
    assert code == 2
    assert problems_of(err) == ["--workload: 'chatt' is neither a seed workload (chat, code, rag, long) nor a file; pass a name or a path"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rate", "-3"], "--rate: must be a number of requests/s > 0 (got -3.0)"),
        (["--rate", "1", "--target", "1.5"], "--target: a fraction in (0, 1), e.g. 0.99 (got 1.5)"),
        (["--rate", "1", "--yes"], "--yes: only meaningful with --write-stack NAME"),
        (["--rate", "1", "--slo-ttft", "0.05"], "--slo-ttft: 0.05 s cannot be met even at 10% load"),
    ],
)
def test_bad_flags_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    code, _, err = plan_pd(capsys, "--workload", "chat", "--profile", PROFILE, *args)
    assert code == 2
    (line,) = problems_of(err)
    assert line.startswith(expected)


def test_bad_trace_lines_are_reported_by_line_number(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"input_tokens": 100, "output_tokens": 10}\n{"input_tokens": 100}\nnot json\n{"input_tokens": 0, "output_tokens": 5}\n'
    )
    code, _, err = plan_pd(capsys, "--workload", str(trace), "--rate", "1", "--profile", PROFILE, "--slo-ttft", "2", "--slo-tpot", "0.1")
    assert code == 2
    lines = problems_of(err)
    assert lines[0].startswith("line 2: output_tokens: field required")
    assert lines[1].startswith("line 3: not JSON")
    assert lines[2].startswith("line 4: input_tokens: Input should be greater than or equal to 1")


def test_trace_without_slo_needs_flags_or_a_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_tokens": 2000, "output_tokens": 500}\n{"input_tokens": 6000, "output_tokens": 300}\n')
    code, _, err = plan_pd(capsys, "--workload", str(trace), "--rate", "10", "--profile", PROFILE)
    assert code == 2
    assert problems_of(err)[0].startswith("--slo-ttft: required")
    code, out, _ = plan_pd(capsys, "--workload", str(trace), "--rate", "10", "--profile", PROFILE, "--stack", "prod", "--json", *FAST)
    assert code == 0 and json.loads(out)["slo"] == {"ttft_seconds": 3.0, "tpot_seconds": 0.08}


def test_bad_workload_yaml_names_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("schema_version: 1\nname: mix\nrequests:\n  - {input_tokens: 2048, output_tokens: 1024, shares: 1}\n")
    code, _, err = plan_pd(capsys, "--workload", str(path), "--rate", "1", "--profile", PROFILE)
    assert code == 2
    assert problems_of(err) == [
        "requests[0].share: field required; add it (see the example in releases/ or stacks/)",
        "requests[0].shares: unknown field (got 1); check the spelling",
    ]


def _mutate(doc: dict, dotted: str, value: object) -> dict:
    node = doc
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = value
    return doc


@pytest.mark.parametrize(
    ("dotted", "value", "expected"),
    [
        ("prefil", {}, "prefil: unknown field (got {}); check the spelling"),
        ("provenance.source", "guessed", "provenance.source: Input should be 'benchmark' or 'hand-entered' (got 'guessed')"),
        (
            "prefill.ttft_p99_seconds.seconds",
            [[0.2, 0.6], [20.0]],
            "prefill.ttft_p99_seconds.seconds[1]: 1 values for 2 load values; one value per load value",
        ),
        (
            "prefill.ttft_p99_seconds.seconds",
            [[0.05, 0.6], [20.0, 60.0]],
            "prefill.ttft_p99_seconds.seconds[0]: 0.05 s at 1000 tokens is faster than the prefill itself (0.100 s",
        ),
        (
            "decode.tpot_seconds.seconds",
            [[0.03, 0.01], [0.03, 0.05]],
            "decode.tpot_seconds.seconds[0]: falls as batch rises (got [0.03, 0.01]); a measured curve here never falls, fix the outlier",
        ),
        ("decode.tpot_seconds.batch", [100, 1], "decode.tpot_seconds.batch: must be strictly increasing (got [100, 1])"),
        ("kv_transfer.gbytes_per_second", 0, "kv_transfer.gbytes_per_second: Input should be greater than 0 (got 0)"),
    ],
)
def test_bad_profile_is_one_line_per_problem_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dotted: str, value: object, expected: str
) -> None:
    path = write_profile(tmp_path, _mutate(hand_profile(), dotted, value))
    code, _, err = plan_pd(capsys, "--workload", "chat", "--rate", "1", "--profile", path)
    assert code == 2
    lines = problems_of(err)
    assert any(line.startswith(expected) for line in lines), lines


def test_profile_measured_on_another_group_shape_is_refused_for_a_stack(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_pd(capsys, "--workload", "chat", "--rate", "1", "--profile", PROFILE, "--stack", "poc")
    assert code == 2
    lines = problems_of(err)
    assert lines[0].startswith("pools.prefill.nodes_per_group: stack poc has 1, profile h200-deepseek-v3 was measured with 2")


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    """A copy of the prod stack with one group per pool, so any real plan is a change."""
    text = (STACKS_DIR / "Pulumi.prod.yaml").read_text()
    one = {"groups": 1, "min_groups": 1}
    (tmp_path / "Pulumi.prod.yaml").write_text(update_pool_fields(text, {"prefill": one, "decode": one}, "copy"))
    return tmp_path


def test_write_stack_shows_a_diff_and_writes_nothing_without_yes(capsys: pytest.CaptureFixture[str], stacks: Path) -> None:
    before = (stacks / "Pulumi.prod.yaml").read_text()
    args = ["--workload", "chat", "--rate", "300", "--profile", PROFILE, "--write-stack", "prod", "--stacks-dir", str(stacks), *FAST]
    code, out, _ = plan_pd(capsys, *args)
    assert code == 0
    assert "--- a/" in out and "+++ b/" in out and "-        groups: 1\n" in out and "+        groups: " in out
    assert "not written: review the diff, then add --yes" in out
    assert (stacks / "Pulumi.prod.yaml").read_text() == before


def test_write_stack_with_yes_edits_only_group_lines_and_the_stack_still_loads(capsys: pytest.CaptureFixture[str], stacks: Path) -> None:
    path = stacks / "Pulumi.prod.yaml"
    before = path.read_text()
    args = [
        "--workload",
        "chat",
        "--rate",
        "300",
        "--profile",
        PROFILE,
        "--write-stack",
        "prod",
        "--stacks-dir",
        str(stacks),
        "--yes",
        "--json",
        *FAST,
    ]
    code, out, _ = plan_pd(capsys, *args)
    assert code == 0
    report = json.loads(out)
    assert report["stack"]["written"] is True
    after = path.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert {a.split(":")[0].strip() for a, _ in changed} <= {"groups", "min_groups"}
    assert [line for line in before.splitlines() if line.lstrip().startswith("#")] == [
        line for line in after.splitlines() if line.lstrip().startswith("#")
    ]
    pools = load_stack("prod", stacks).platform.pools
    assert (pools.prefill.groups, pools.decode.groups) == (report["pools"]["prefill"]["groups"], report["pools"]["decode"]["groups"])
    assert pools.prefill.min_groups == report["pools"]["prefill"]["min_groups"] <= pools.prefill.groups
    # Written once, the same plan is a no-op.
    code, out, _ = plan_pd(capsys, *[a for a in args if a != "--json"])
    assert code == 0 and "already holds these group counts" in out


def test_line_edit_keeps_trailing_comments_and_names_missing_lines() -> None:
    text = "config:\n  inferplane:platform:\n    pools:\n      prefill:\n        groups: 4  # from the plan\n      decode:\n        min_groups: 1\n"
    new = update_pool_fields(text, {"prefill": {"groups": 9}}, "s.yaml")
    assert "        groups: 9  # from the plan\n" in new
    with pytest.raises(ConfigError) as exc:
        update_pool_fields(text, {"decode": {"groups": 3}}, "s.yaml")
    assert exc.value.problems == ["pools.decode.groups: no line to update; add it to the stack file first"]
