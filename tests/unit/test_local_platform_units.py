"""The local platform's pure parts and process control, without starting the platform.

Process identity is tested on real processes (sleep): a PID whose start time or arguments differ
is never signalled.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inferplane.errors import ConfigError
from inferplane.local import components, proc
from inferplane.local.config import CONFIG_FILE, load_config, parse_config
from inferplane.local.handle import free_base_port
from inferplane.local.layout import SPAN, Layout


def test_shipped_inventory_config_loads_and_keeps_platform_backend_local() -> None:
    cfg = load_config()
    assert cfg.groups.prefill >= 1 and cfg.groups.decode >= 1
    platform_yml = yaml.safe_load((CONFIG_FILE.parent / "platform.yml").read_text())
    assert platform_yml["platform_backend"] == "local"


def test_config_errors_are_one_line_per_problem_with_the_path() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"groups": {"prefill": 0, "decodez": 1}, "etcd_members": 2})
    lines = exc.value.problems
    assert any(line.startswith("local_platform.groups.prefill:") for line in lines)
    assert any(line.startswith("local_platform.groups.decodez:") and "unknown field" in line for line in lines)
    assert any(line.startswith("local_platform.etcd_members:") and "use 1, 3 or 5" in line for line in lines)
    assert all("\n" not in line for line in lines)


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    cfg = load_config(state_dir=str(tmp_path), base_port=20000)
    assert cfg.state_path == tmp_path and cfg.base_port == 20000


def test_every_port_is_distinct_and_inside_the_span() -> None:
    cfg = parse_config({"groups": {"prefill": 50, "decode": 50, "encoder": 50}, "etcd_members": 5, "mooncake": {"masters": 3}})
    layout = Layout.of(cfg, 20000)
    ports = [p for by_purpose in layout.ports().values() for p in by_purpose.values()]
    assert len(ports) == len(set(ports))
    assert min(ports) >= 20000 and max(ports) < 20000 + SPAN


def test_group_ports_do_not_depend_on_other_roles_counts() -> None:
    # A group's URL is its identity in SMG: adding encoders must not move decode-0.
    a = Layout.of(parse_config({"groups": {"prefill": 1, "decode": 2, "encoder": 0}}), 20000)
    b = Layout.of(parse_config({"groups": {"prefill": 3, "decode": 2, "encoder": 2}}), 20000)
    assert a.group("decode-0").url == b.group("decode-0").url
    assert a.group("prefill-0").bootstrap_port == b.group("prefill-0").bootstrap_port


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5), ("1m", 60), ("1h30m", 5400), ("250ms", 0.25), ("15m", 900)])
def test_duration_seconds(text: str, seconds: float) -> None:
    assert components.duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m", "5x"])
def test_duration_seconds_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        components.duration_seconds(text)


def test_cap_for_shortens_only_longer_waits() -> None:
    doc = {"groups": [{"name": "g", "rules": [{"alert": "A", "for": "1m"}, {"alert": "B", "for": "2s"}, {"alert": "C"}]}]}
    rules = components.cap_for(doc, "5s")["groups"][0]["rules"]
    assert [r.get("for") for r in rules] == ["5s", "2s", None]


def test_local_rules_are_ours_with_waits_capped(tmp_path: Path) -> None:
    from inferplane.observability.rules import alert_names

    cfg = load_config(state_dir=str(tmp_path))
    spec = components.prometheus(Layout.of(cfg), cfg, tmp_path)
    rules_path = tmp_path / "prometheus" / "rules.yml"
    writer = spec.files[str(rules_path)]
    assert callable(writer)
    writer(rules_path)
    rules = [r for g in yaml.safe_load(rules_path.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == set(alert_names(cfg.observability.thresholds, kv_over_rdma=False))
    assert all(components.duration_seconds(r["for"]) <= 5 for r in rules if "for" in r)
    promtool = pytest.importorskip("shutil").which("promtool")
    if promtool:
        res = subprocess.run([promtool, "check", "rules", str(rules_path)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


def test_prometheus_scrape_jobs_are_the_ones_rules_select_on(tmp_path: Path) -> None:
    from inferplane.observability.metrics import SCRAPE_JOBS

    cfg = load_config(state_dir=str(tmp_path))
    config = components.prometheus_config(Layout.of(cfg), cfg, tmp_path / "rules.yml")
    jobs = {j["job_name"] for j in config["scrape_configs"]}
    assert jobs == {"sglang", "smg", "mooncake-master", "etcd"}
    assert jobs <= set(SCRAPE_JOBS)
    engines = next(j for j in config["scrape_configs"] if j["job_name"] == "sglang")["static_configs"]
    assert len(engines) == cfg.groups.prefill + cfg.groups.decode + cfg.groups.encoder


def test_smg_argv_comes_from_gateway_args_with_every_group(tmp_path: Path) -> None:
    pytest.importorskip("smg.launch_router")
    from smg.launch_router import parse_router_args

    cfg = load_config(state_dir=str(tmp_path))
    layout = Layout.of(cfg, 20000)
    spec = components.smg(layout, cfg, "k3y")
    ra = parse_router_args(spec.argv[2:])
    assert ra.pd_disaggregation is True
    assert ra.prefill_urls == [(s.url, s.bootstrap_port) for s in layout.groups if s.role == "prefill"]
    assert ra.decode_urls == [s.url for s in layout.groups if s.role == "decode"]
    assert ra.port == layout.smg and ra.host == "127.0.0.1"


def test_missing_binary_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(components.MissingBinary) as exc:
        components.binary("etcd")
    assert "etcd-server" in str(exc.value)
    with pytest.raises(components.MissingBinary) as exc:
        components.binary("mooncake_master")
    assert "mooncake-transfer-engine-non-cuda" in str(exc.value)


def test_spawned_process_is_ours_until_its_identity_changes(tmp_path: Path) -> None:
    ident = proc.spawn(["sleep", "30"], log=tmp_path / "s.log", env={}, state_dir=tmp_path, cwd=tmp_path)
    try:
        assert proc.is_ours(ident)
        assert ident.pid in proc.tagged(tmp_path)
        # Same PID, other start time: a reused PID is never signalled.
        assert not proc.is_ours(proc.Identity(ident.pid, ident.starttime + 1, ident.args))
        assert not proc.terminate(proc.Identity(ident.pid, ident.starttime + 1, ident.args))
        assert proc.running(ident.pid)
        assert proc.pause(ident) and proc.stopped(ident.pid)
        assert proc.resume(ident) and not proc.stopped(ident.pid)
        assert proc.terminate(ident, timeout=5)
        assert not proc.running(ident.pid) and proc.tagged(tmp_path) == []
    finally:
        proc.kill(ident)


def test_a_process_with_other_arguments_and_no_tag_is_not_ours() -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        # Until the child has exec'd, /proc shows the forked interpreter's arguments (seen in CI).
        deadline = time.monotonic() + 5
        while proc.cmdline(other.pid)[-1:] != ["30"] and time.monotonic() < deadline:
            time.sleep(0.01)
        st = proc.starttime(other.pid)
        assert st is not None
        assert proc.is_ours(proc.Identity(other.pid, st, ("30",)))
        assert not proc.is_ours(proc.Identity(other.pid, st, ("31",)))
        assert not proc.kill(proc.Identity(other.pid, st, ("31",)))
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_terminate_reaches_children_left_in_the_group(tmp_path: Path) -> None:
    script = "sleep 30 & sleep 30 & wait"
    ident = proc.spawn(["sh", "-c", script], log=tmp_path / "s.log", env={}, state_dir=tmp_path, cwd=tmp_path)
    deadline = time.monotonic() + 5
    while len(proc.tagged(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(proc.tagged(tmp_path)) == 3
    assert proc.terminate(ident, timeout=5)
    assert proc.tagged(tmp_path) == []


def test_port_free_and_owner() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not proc.port_free(port)
        owner = proc.port_owner(port)
        assert owner is not None and owner.startswith("pid ")
    assert proc.port_free(port)


def test_free_base_port_finds_a_whole_free_layout(tmp_path: Path) -> None:
    cfg = load_config(state_dir=str(tmp_path))
    base = free_base_port(cfg, seed=1)
    assert all(proc.port_free(p) for ports in Layout.of(cfg, base).ports().values() for p in ports.values())
