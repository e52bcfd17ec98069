"""The alert rules under the real promtool: syntax, and every alert fires and stays quiet (tests/promtool/)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from inferplane.observability.rules import RUNBOOK, alert_names, rule_groups, write_rules_file
from inferplane.spec import Thresholds
from tests.conftest import REPO_ROOT

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (scripts/install-deps.sh: prometheus)")

TEST_DIR = REPO_ROOT / "tests" / "promtool"
# The numbers the YAML tests are written against (their header comments repeat them).
THRESHOLDS = Thresholds(
    ttft_p99_seconds=2.0,
    tpot_p99_seconds=0.1,
    prefill_queue_high=64,
    decode_queue_high=32,
    kv_usage_high=0.92,
    kv_transfer_failures_per_minute=1.0,
    kv_transfer_speed_low_gb_s=5.0,
    for_duration="5m",
)


def _stage(tmp_path: Path, thresholds: Thresholds = THRESHOLDS) -> list[Path]:
    full = write_rules_file(tmp_path / "rules-full.yaml", thresholds)
    # Firing logic (expr, for, labels) is tested on a copy without annotations so the tests need not
    # repeat every description; annotations.yaml checks the real file's rendered annotations.
    doc = yaml.safe_load(full.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    staged = []
    for test_file in sorted(TEST_DIR.glob("*.yaml")):
        staged.append(Path(shutil.copy(test_file, tmp_path / test_file.name)))
    return staged


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, check=False)


def test_rule_file_passes_promtool_check(tmp_path: Path) -> None:
    path = write_rules_file(tmp_path / "rules.yaml", THRESHOLDS)
    done = _promtool("check", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names(THRESHOLDS))} rules found" in done.stdout


def test_every_alert_fires_and_stays_quiet_under_promtool(tmp_path: Path) -> None:
    staged = _stage(tmp_path)
    done = _promtool("test", "rules", *staged)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_tests_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    # The tests are sensitive to the rules: a decode-queue threshold of 100 must break them.
    staged = _stage(tmp_path, THRESHOLDS.model_copy(update={"decode_queue_high": 100}))
    done = _promtool("test", "rules", *[p for p in staged if p.name == "prefill_decode.yaml"])
    assert done.returncode != 0
    assert "DecodeQueueHigh" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for test_file in TEST_DIR.glob("*.yaml"):
        for case in yaml.safe_load(test_file.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(alert_names(THRESHOLDS))
    assert names - fires == set(), "alerts never shown to fire"
    assert names - quiet == set(), "alerts never shown to stay quiet"
    assert (fires | quiet) - names == set(), "tests name alerts that do not exist"


def test_kv_tcp_fallback_alert_is_left_out_on_a_tcp_stack() -> None:
    assert "KVTransferSlowTcpFallback" in alert_names(THRESHOLDS)
    assert "KVTransferSlowTcpFallback" not in alert_names(THRESHOLDS, kv_over_rdma=False)


def test_every_alert_links_to_its_section_of_the_alerts_runbook() -> None:
    runbook = (REPO_ROOT / RUNBOOK).read_text()
    headings = {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}
    for group in rule_groups(THRESHOLDS):
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == f"{RUNBOOK}#{rule['alert'].lower()}"
            assert rule["alert"] in headings, f"{RUNBOOK} has no section '## {rule['alert']}'"
