"""playbooks/warmup.yml end to end on this machine: the validation play, the role, the module,
against a real S3 endpoint (moto_server, signatures enforced). Molecule covers the role in
containers; this covers the playbook an operator runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from inferplane.testing.s3 import S3Endpoint, moto_s3, upload_dir
from inferplane.testing.tiny_model import make_model

REPO = Path(__file__).resolve().parents[2]
RELEASE = yaml.safe_load((REPO / "releases" / "local.yaml").read_text())


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    model = make_model(tmp_path_factory.mktemp("model") / "emu-tiny")  # the bytes releases/local.yaml pins
    with moto_s3() as endpoint:
        upload_dir(endpoint.client(), "models", "emu-tiny", model)
        yield endpoint


def inventory(tmp_path: Path, s3: S3Endpoint, hosts: dict[str, dict[str, str]]) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {"all": {"children": {"controller": {"hosts": {"localhost": {"ansible_connection": "local"}}}, "gpu_nodes": {"hosts": hosts}}}}
        )
    )
    (inv / "group_vars" / "all" / "platform.yml").write_text(
        yaml.safe_dump(
            {
                "platform_backend": "local",
                "ansible_python_interpreter": sys.executable,
                "inferplane_release": "{{ lookup('ansible.builtin.file', '%s') | from_yaml }}" % (REPO / "releases" / "local.yaml"),
                "model_warmup_s3_endpoint": s3.endpoint,
                "model_warmup_s3_access_key": s3.access_key,
                "model_warmup_s3_secret_key": s3.secret_key,
                "model_warmup_report_dir": str(tmp_path / "records"),
                "model_warmup_throttle": 1,
            }
        )
    )
    return inv


def playbook(inv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "default"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(REPO / "playbooks" / "warmup.yml"), *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def recap(out: str) -> dict[str, dict[str, int]]:
    return {m[0]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[1])} for m in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", out, re.M)}


def test_warms_two_nodes_records_them_and_a_second_run_changes_nothing(s3: S3Endpoint, tmp_path: Path) -> None:
    hosts = {name: {"ansible_connection": "local", "model_warmup_dest": str(tmp_path / name / "emu-tiny")} for name in ("node-a", "node-b")}
    inv = inventory(tmp_path, s3, hosts)
    first = playbook(inv)
    assert first.returncode == 0, first.stdout[-3000:]
    assert recap(first.stdout)["node-a"]["changed"] > 0
    for name in hosts:
        record = json.loads((tmp_path / "records" / f"{name}.json").read_text())
        assert record["verified"]["weights_manifest_sha256"] == RELEASE["models"]["emu-tiny"]["weights_manifest_sha256"]
        assert record["source"].startswith("s3://models/emu-tiny/") and record["last_copy"]["bytes"] == record["bytes"]
        assert (tmp_path / name / "emu-tiny" / "config.json").is_file()
    second = playbook(inv)
    assert second.returncode == 0, second.stdout[-3000:]
    assert all(r["changed"] == 0 for r in recap(second.stdout).values()), second.stdout[-3000:]


def test_check_mode_writes_nothing(s3: S3Endpoint, tmp_path: Path) -> None:
    inv = inventory(tmp_path, s3, {"node-a": {"ansible_connection": "local", "model_warmup_dest": str(tmp_path / "a")}})
    res = playbook(inv, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert not (tmp_path / "a").exists()


def test_the_validation_play_stops_on_a_model_not_in_the_release(s3: S3Endpoint, tmp_path: Path) -> None:
    inv = inventory(tmp_path, s3, {"node-a": {"ansible_connection": "local", "model_warmup_dest": str(tmp_path / "a")}})
    res = playbook(inv, "-e", "model_warmup_model=nope")
    assert res.returncode != 0
    assert "model 'nope' is not in release local-2026.11.0 (emu-tiny); pass -e model_warmup_model=NAME" in res.stdout
    assert not (tmp_path / "a").exists()


def test_the_validation_play_stops_when_there_are_no_nodes(s3: S3Endpoint, tmp_path: Path) -> None:
    inv = inventory(tmp_path, s3, {})
    res = playbook(inv)
    assert res.returncode != 0 and "no hosts match 'gpu_nodes' in this inventory" in res.stdout
