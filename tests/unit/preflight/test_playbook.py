"""playbooks/preflight.yml end to end through scripts/preflight, on this machine: two "nodes" with
ansible_connection=local and the fake tools first on PATH. The exit status tells pass (0), warnings (1),
failures (2) and a run that could not finish (3); --check still writes the report and applies no label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import FIXTURES, port_block

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def inventory(tmp_path: Path, nodes: dict[str, dict]) -> Path:
    doc = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "platform_backend": "local",
                "inferplane_release": yaml.safe_load((FIXTURES / "release-gpu-stack.yaml").read_text()),
                "preflight_gpu_count": 8,
                "preflight_gpu_nvlinks_per_gpu": 18,
                "preflight_gpu_nvswitch": True,
                "preflight_topology_gpu_nic": {i: f"mlx5_{i}" for i in range(8)},
                "preflight_rdma_devices": [f"mlx5_{i}" for i in range(8)],
                "preflight_rdma_mtu": 4096,
                "preflight_rdma_gid_index": 3,
                "preflight_rdma_memlock_min_kib": 64,
                "preflight_host_shm_min_gib": 0.01,
                "preflight_host_cache_dir": str(tmp_path / "cache"),
                "preflight_host_cache_min_free_gib": 0.01,
                "preflight_fabric_address": "127.0.0.1",
                "preflight_fabric_duration_s": 1,
                "preflight_fabric_session_root": str(tmp_path / "sessions"),
                "preflight_fabric_rails": [{"gpu": 0, "device": "mlx5_0"}],
                "preflight_fabric_tests": ["rdma_same_rack", "gpudirect_same_rack", "kv_rdma"],
                "preflight_fabric_floors": {"rdma_same_rack": 360, "gpudirect_same_rack": 350, "kv_rdma": 20},
            },
            "children": {"gpu_nodes": {"hosts": nodes}},
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def preflight(tmp_path: Path, hosts: Path, variant: str, *args: str) -> tuple[int, str, dict | None]:
    env = {**os.environ, "INFERPLANE_FAKE_VARIANT": variant, "ANSIBLE_PLAYBOOK": str(ANSIBLE_PLAYBOOK), "PYTHON": sys.executable}
    report = tmp_path / "report"
    proc = subprocess.run(
        [str(REPO / "scripts" / "preflight"), "-i", str(hosts), "--report-dir", str(report), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = report / "summary.json"
    return proc.returncode, proc.stdout + proc.stderr, json.loads(summary.read_text()) if summary.exists() else None


@pytest.fixture
def two_nodes(tmp_path: Path) -> Path:
    a, b = port_block(), port_block()
    return inventory(
        tmp_path, {"n1": {"rack": "rack-a", "preflight_fabric_base_port": a}, "n2": {"rack": "rack-a", "preflight_fabric_base_port": b}}
    )


@pytest.mark.usefixtures("fake_path")
def test_a_healthy_fleet_passes_with_exit_0(tmp_path: Path, two_nodes: Path):
    rc, out, summary = preflight(tmp_path, two_nodes, "healthy")
    assert rc == 0, out
    assert summary and summary["status"] == "pass" and summary["counts"] == {"pass": 2, "warn": 0, "fail": 0}
    assert summary["fabric_tests"] == ["fabric_rdma_same_rack", "fabric_gpudirect_same_rack", "fabric_kv_rdma"]
    assert "preflight: fleet pass, exit 0" in out
    assert not (tmp_path / "sessions").exists()


@pytest.mark.usefixtures("fake_path")
def test_failing_nodes_exit_2_and_are_listed_even_in_check_mode(tmp_path: Path, two_nodes: Path):
    doc = yaml.safe_load(two_nodes.read_text())
    # A third node nobody can reach (ssh to a closed port) is reported, not silently dropped.
    doc["all"]["children"]["gpu_nodes"]["hosts"]["n3"] = {
        "rack": "rack-a",
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": port_block(1),
    }
    two_nodes.write_text(yaml.safe_dump(doc))
    rc, out, summary = preflight(tmp_path, two_nodes, "ecc", "--check")
    assert rc == 2, out
    assert "Preflight failed on 3 node(s)" in out and "n1: gpu_ecc" in out and "n2: gpu_ecc" in out and "n3: node_reachable" in out
    assert summary and summary["labels"] == {"applied": False, "reason": "not applied: --check"}
    node = json.loads((tmp_path / "report" / "nodes" / "n1.json").read_text())
    assert node["failing"] == ["gpu_ecc"]
    assert {s["name"] for s in node["skipped"]} == {"fabric_gpudirect_same_rack"}


@pytest.mark.usefixtures("fake_path")
def test_warnings_only_exit_1_and_limit_scopes_the_report(tmp_path: Path, two_nodes: Path):
    rc, out, summary = preflight(tmp_path, two_nodes, "healthy", "--tags", "fabric", "--limit", "n1")
    assert rc == 1, out
    assert summary and summary["status"] == "warn" and list(summary["nodes"]) == ["n1"]
    assert {w["name"] for w in summary["warnings"]} == {"fabric_rdma_same_rack", "fabric_gpudirect_same_rack", "fabric_kv_rdma"}
    assert all(w["observed"].startswith("no peer") for w in summary["warnings"])


@pytest.mark.usefixtures("fake_path")
def test_an_invalid_inventory_stops_before_any_node_with_exit_3(tmp_path: Path):
    hosts = inventory(tmp_path, {"n1": {}})
    rc, out, summary = preflight(tmp_path, hosts, "healthy")
    assert rc == 3 and summary is None
    assert "n1: no `rack` variable" in out and "preflight: no verdict" in out


def test_standalone_run_on_a_machine_without_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """scripts/preflight-standalone.sh as the coordinator runs it on the H200, here where nvidia-smi is absent."""
    wheels = REPO / "build" / "wheels" / f"py{sys.version_info[0]}{sys.version_info[1]}"
    if not list(wheels.glob("ansible_core-*.whl")):
        pytest.skip(f"no wheels in {wheels}: run scripts/fetch-preflight-wheels.sh {sys.version_info[0]}.{sys.version_info[1]}")
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(str(REPO))))
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(REPO / "scripts" / "preflight-standalone.sh"), str(out), "--gpus", "1", "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    (node,) = summary["nodes"].values()
    assert node["rack"] == "standalone" and "gpu_count" in node["failing"] and "rdma_devices" in node["failing"]
    gpu = next(f for f in summary["failures"] if f["name"] == "gpu_count")
    assert gpu["observed"] == "0 (nvidia-smi unusable: nvidia-smi: command not found)"
    assert (out / "summary.md").exists() and (out / "ansible.log").exists() and (out / "inventory" / "hosts.yml").exists()
