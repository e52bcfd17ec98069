"""Helpers for the upgrade and blue/green tests: run the real playbooks with ansible-runner against
the session's local platform, write target releases, read the evidence."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferplane.local.handle import PlatformHandle
from inferplane.local.http import get_json
from inferplane.node.engine_metrics import MetricsError, fetch
from inferplane.spec import REPO_ROOT

BASE_RELEASE = REPO_ROOT / "releases" / "local.yaml"
INVENTORY = REPO_ROOT / "inventories" / "local" / "hosts.yml"


@dataclass
class PlaybookRun:
    rc: int
    status: str
    stdout: str
    failures: list[str]  # msg of every failed task, rescued ones included, in order

    @property
    def final_failure(self) -> str:
        return self.failures[-1] if self.failures else ""


def run_playbook(playbook: str, extravars: dict[str, Any], workdir: Path, check: bool = False) -> PlaybookRun:
    """``ansible-playbook playbooks/<playbook>`` on the local inventory, as an operator runs it."""
    import ansible_runner

    private = workdir / f"runner-{uuid.uuid4().hex[:8]}"
    private.mkdir(parents=True)
    venv_bin = str(Path(sys.executable).parent)
    envvars = {
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
    }
    result = ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(REPO_ROOT / "playbooks" / playbook),
        inventory=str(INVENTORY),
        extravars=extravars,
        envvars=envvars,
        cmdline="--check" if check else None,
        quiet=True,
    )
    failures = []
    for event in result.events:
        if event.get("event") == "runner_on_failed":
            res = event.get("event_data", {}).get("res", {})
            items = [str(r.get("msg")) for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
            failures.append(" | ".join(items) if items else str(res.get("msg", res)))
    stdout = result.stdout.read() if result.stdout else ""
    return PlaybookRun(result.rc, result.status, stdout, failures)


def write_release(workdir: Path, name: str, changes: dict[str, Any]) -> Path:
    """releases/local.yaml with dotted-path ``changes`` (e.g. {"runtime.sglang_version": "0.5.24"})."""
    data = yaml.safe_load(BASE_RELEASE.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def patch_release(workdir: Path, version: str = "0.5.24") -> Path:
    """The next SGLang patch release: same model, KV layout and transfer ABI; a new image."""
    image = yaml.safe_load(BASE_RELEASE.read_text())["runtime"]["sglang_image"].split("@")[0]
    return write_release(
        workdir,
        f"local-{version}",
        {"release": f"local-{version}", "runtime.sglang_version": version, "runtime.sglang_image": f"{image}@sha256:{'ab' * 32}"},
    )


def evidence(evidence_dir: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(run.json, {group: record}) of the newest run under ``evidence_dir``."""
    runs = sorted((p for p in evidence_dir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    latest = runs[-1]
    run = json.loads((latest / "run.json").read_text()) if (latest / "run.json").is_file() else {}
    records = {p.stem: json.loads(p.read_text()) for p in latest.glob("*.json") if p.name != "run.json"}
    return run, records


def versions(handle: PlatformHandle) -> dict[str, str]:
    return {g.name: g.version for g in handle.groups()}


def worker_status(handle: PlatformHandle, gateway_url: str | None = None) -> dict[str, str]:
    """URL -> SMG status on the platform's gateway (or another)."""
    url = gateway_url or handle.gateway_url
    body = get_json(url + "/workers", headers=handle.admin_headers, timeout=5) or {}
    return {w["url"]: w["status"] for w in body.get("workers", [])}


def settle_store(handle: PlatformHandle, timeout: float = 60.0) -> None:
    """Wait until the Mooncake leader counts no more store clients than there are P/D engines: a
    restarted engine's previous client stays registered until the master's client_ttl expires, and
    KV placed on its segment would fail."""
    want = len([g for g in handle.groups() if g.role in ("prefill", "decode")])
    deadline = time.monotonic() + timeout
    active = -1
    while time.monotonic() < deadline:
        leader = handle.mooncake_leader()
        for m in handle.state.endpoints.mooncake.masters:
            if m.name == leader:
                try:
                    active = int(fetch(m.metrics_url).get("master_active_clients", -1))
                except MetricsError:
                    active = -1
        if 0 <= active <= want:
            return
        time.sleep(0.5)
    raise AssertionError(f"the Mooncake leader still counts {active} store clients after {timeout}s ({want} engines)")


def restore(handle: PlatformHandle) -> None:
    handle.restore()
    settle_store(handle)
