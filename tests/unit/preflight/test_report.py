"""Report assembly: statuses, unreachable nodes, labels, summary and Markdown."""

from __future__ import annotations

from inferplane.node.checks import check, node_status, skip
from inferplane.node.report import assemble, label_value


def results(*checks, skipped=(), topology=None) -> dict:
    return {
        "gpu": {"checks": list(checks), "skipped": list(skipped), "facts": {}},
        "topology": {"checks": [], "skipped": [], "facts": topology or {}},
    }


def test_statuses_labels_and_an_unreachable_node():
    ok = check("gpu", "gpu_count", "ok", 8, 8, "ignored for ok lines")
    warn = check("gpu", "gpu_persistence", "warn", "disabled on GPU1", "enabled", "run nvidia-persistenced")
    fail = check("gpu", "gpu_ecc", "fail", "GPU4 1 volatile | uncorrectable", "0", "reset the GPU")
    gpu_map = {"gpu_map": {"0": {"numa": 0, "nic": "mlx5_0", "link": "PXB"}, "1": {"numa": 1, "nic": None, "link": None}}}
    out = assemble(
        [
            {"name": "a1", "rack": "rack-a", "results": results(ok, topology=gpu_map)},
            {"name": "a2", "rack": "rack-a", "results": results(ok, warn)},
            {"name": "b1", "rack": "rack/b", "results": results(fail, skipped=[skip("gpu", "gpu_memory", "see gpu_model")])},
            {"name": "b2", "rack": "rack-b", "results": None},
        ],
        None,
        {},
        [],
        release="2026.11.0",
    )
    nodes, summary = out["nodes"], out["summary"]
    assert {n: r["status"] for n, r in nodes.items()} == {"a1": "pass", "a2": "warn", "b1": "fail", "b2": "fail"}
    assert nodes["a1"]["checks"][0]["hint"] == ""
    assert nodes["b2"]["failing"] == ["node_reachable"] and "play recap" in nodes["b2"]["checks"][0]["hint"]
    assert nodes["a1"]["labels"] == {
        "inferplane.io/preflight": "pass",
        "inferplane.io/rack": "rack-a",
        "inferplane.io/preflight-release": "2026.11.0",
        "inferplane.io/gpu0-nic": "mlx5_0",
        "inferplane.io/gpu0-numa": "0",
        "inferplane.io/gpu1-numa": "1",
    }
    assert nodes["b1"]["labels"]["inferplane.io/rack"] == "rack-b"
    assert summary["status"] == "fail" and summary["counts"] == {"pass": 1, "warn": 1, "fail": 2}
    assert [(f["node"], f["name"]) for f in summary["failures"]] == [("b1", "gpu_ecc"), ("b2", "node_reachable")]
    assert summary["nodes"]["b1"] == {"rack": "rack/b", "status": "fail", "failing": ["gpu_ecc"], "warnings": [], "skipped": 1}
    md = out["markdown"]
    assert "**fail** (1 pass, 1 warn, 2 fail)" in md
    assert "| b1 | gpu_ecc | GPU4 1 volatile \\| uncorrectable | 0 | reset the GPU |" in md
    assert "| b1 | gpu_memory | see gpu_model |" in md


def test_label_values_are_valid_kubernetes_values():
    assert label_value("rack a/01") == "rack-a-01"
    assert label_value("-x-") == "x"
    assert len(label_value("r" * 80)) == 63


def test_node_status_of_no_checks_passes():
    assert node_status([]) == "pass"
