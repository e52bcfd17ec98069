"""The prod stack's group counts are what the planner run recorded in docs/capacity/prod-plan.md gives.

A hand edit of the stack, or a planner change that moves the answer, fails here: re-run the
recorded command (it prints the diff) and update the record with the new output.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from inferplane.cli import main
from inferplane.planner.profile import load_profile
from inferplane.spec import load_stack
from tests.conftest import REPO_ROOT

RECORD = REPO_ROOT / "docs" / "capacity" / "prod-plan.md"


def recorded_args() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", RECORD.read_text(), re.S)
    assert block, f"{RECORD} has no ```sh block with the planner command"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    assert words[:3] == ["inferplane", "plan", "pd"] and "--write-stack" in words and "--yes" in words
    return [w for w in words[3:] if w not in ("--yes",)]


def test_prod_group_counts_come_from_the_recorded_planner_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    args = recorded_args()
    i = args.index("--write-stack")
    assert args[i + 1] == "prod"
    code = main(["plan", "pd", *args[:i], *args[i + 2 :], "--stack", "prod", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    pools = load_stack("prod").platform.pools
    for role, pool in (("prefill", pools.prefill), ("decode", pools.decode)):
        planned = report["pools"][role]
        assert (pool.groups, pool.min_groups) == (planned["groups"], planned["min_groups"]), role
    assert f"{report['gpus']} GPUs in all" in RECORD.read_text()


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "profiles").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_profiles_load_and_say_where_their_numbers_come_from(path) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile(path)
    assert profile.provenance.notes
    if profile.provenance.source == "hand-entered":
        assert "not measured" in profile.provenance.notes.lower() or "illustrative" in profile.provenance.notes.lower()
