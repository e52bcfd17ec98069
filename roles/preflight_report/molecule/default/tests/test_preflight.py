"""Verify the fake fleet's preflight: each node fails exactly its variant's checks, reports and labels are right,
and the nodes were only read (no session directory or test process left behind)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner

_RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
NODES = sorted(_RUNNER.get_hosts("gpu_nodes"))
# podman exec directly: the ansible backend costs an ansible run per call, minutes for fifteen nodes.
testinfra_hosts = [f"podman://{name}" for name in NODES]

REPORT = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "preflight"
VARIANTS = json.loads((Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]).parent.parent / "tests/fixtures/preflight/variants.json").read_text())


def _report(name: str) -> dict:
    return json.loads((REPORT / "nodes" / f"{name}.json").read_text())


def _variant(name: str) -> str:
    return _RUNNER.get_variables(name)["preflight_fake_variant"]


@pytest.mark.parametrize("name", NODES)
def test_node_fails_exactly_its_fault(name):
    report, variant = _report(name), _variant(name)
    expected = sorted(VARIANTS[variant]["expect_fail"])
    assert sorted(report["failing"]) == expected, f"{name} ({variant}): {json.dumps(report['checks'], indent=1)}"
    assert report["status"] == ("fail" if expected else "pass")
    assert report["warnings"] == [], f"{name} ({variant}) warns: {[c for c in report['checks'] if c['status'] == 'warn']}"


@pytest.mark.parametrize("name", NODES)
def test_failing_lines_say_what_to_do(name):
    for line in _report(name)["checks"]:
        if line["status"] == "fail":
            assert line["observed"] and line["expected"] and len(line["hint"]) > 40, line


@pytest.mark.parametrize("name", NODES)
def test_skips_are_explained_by_a_failing_check(name):
    report = _report(name)
    for item in report["skipped"]:
        if item["area"] == "fabric":
            failed = item["reason"].removeprefix("prerequisite failed: ").split(", ")
            assert set(failed) <= set(report["failing"]), (name, item)
        else:
            assert any(check in item["reason"] for check in report["failing"]), (name, item)


@pytest.mark.parametrize("name", NODES)
def test_labels_carry_rack_status_and_rail_map(name):
    report = _report(name)
    labels = report["labels"]
    assert labels["inferplane.io/rack"] == _RUNNER.get_variables(name)["rack"]
    assert labels["inferplane.io/preflight"] == report["status"]
    assert labels["inferplane.io/gpu0-nic"] == "mlx5_0"
    assert labels["inferplane.io/gpu4-numa"] == "1"
    summary = json.loads((REPORT / "summary.json").read_text())
    assert summary["node_labels"][name] == labels
    assert summary["labels"]["applied"] is False


def test_node_state_matches_the_report_and_nothing_is_left_behind(host):
    name = host.backend.get_hostname()
    report = _report(name)
    shm = int(host.check_output("df -B1 --output=size /dev/shm | tail -1"))
    line = next(c for c in report["checks"] if c["name"] == "host_shm")
    assert line["observed"] == f"/dev/shm {shm / (1 << 30):.1f} GiB"
    assert not host.file("/tmp/inferplane-preflight").exists
    # [i]b_... keeps pgrep from matching the shell that runs it.
    assert host.run("pgrep -f '[i]b_write_bw|[t]ransfer_engine_bench'").rc == 1


def test_summary_lists_every_failing_node():
    summary = json.loads((REPORT / "summary.json").read_text())
    markdown = (REPORT / "summary.md").read_text()
    assert summary["status"] == "fail"
    failing = {n for n, s in summary["nodes"].items() if s["status"] == "fail"}
    assert failing == {n for n in NODES if VARIANTS[_variant(n)]["expect_fail"]}
    assert summary["counts"] == {"pass": len(NODES) - len(failing), "warn": 0, "fail": len(failing)}
    for name in failing:
        assert f"| {name} |" in markdown
    assert {f["node"] for f in summary["failures"]} == failing
