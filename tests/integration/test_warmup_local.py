"""Warm-up against the local platform's object store, the way README.md tells an
operator to: the CLI with the AWS environment from `inferplane local status --json`, and
playbooks/warmup.yml on the local inventory (the local backend skips the Fluid steps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferplane.local.handle import PlatformHandle
from inferplane.manifest import load_release
from inferplane.node.weights import hash_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def s3_env(platform: PlatformHandle) -> dict[str, str]:
    status = subprocess.run(
        [sys.executable, "-m", "inferplane.cli", "local", "status", "--json", "--state-dir", str(platform.state_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    s3 = json.loads(status.stdout)["endpoints"]["s3"]
    return {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ACCESS_KEY_ID": s3["access_key_id"], "AWS_SECRET_ACCESS_KEY": s3["secret_access_key"]}


def test_cli_warms_the_local_model_from_the_platform_s_store(local_platform: PlatformHandle, tmp_path: Path) -> None:
    env = {**os.environ, **s3_env(local_platform)}
    dest = tmp_path / "emu-tiny"
    cmd = [sys.executable, "-m", "inferplane.cli", "warmup", "--release", "releases/local.yaml", "--model", "emu-tiny", "--dest", str(dest)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    model = load_release(REPO / "releases" / "local.yaml").models["emu-tiny"]
    assert hash_model(str(dest))["weights_manifest_sha256"] == model.weights_manifest_sha256


def test_playbook_warms_localhost_and_says_the_local_backend_skips_fluid(local_platform: PlatformHandle, tmp_path: Path) -> None:
    s3 = s3_env(local_platform)
    dest = tmp_path / "emu-tiny"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "AWS_ACCESS_KEY_ID": s3["AWS_ACCESS_KEY_ID"]}
    env["AWS_SECRET_ACCESS_KEY"] = s3["AWS_SECRET_ACCESS_KEY"]
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventories/local", "playbooks/warmup.yml"]
    cmd += [
        "-e",
        "model_warmup_hosts=localhost",
        "-e",
        f"model_warmup_dest={dest}",
        "-e",
        f"model_warmup_s3_endpoint={s3['AWS_ENDPOINT_URL']}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "platform_backend=local: the local platform has no Fluid/Alluxio" in res.stdout
    assert (dest / ".inferplane-warmup.json").is_file()
