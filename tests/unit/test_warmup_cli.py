"""`inferplane warmup`: exit codes and messages, a run killed with SIGKILL resumes, S3 credentials
from the environment, progress on a terminal only."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferplane.node.warmup import STATE_FILE
from inferplane.testing.s3 import moto_s3, upload_dir
from tests.unit.warmup_support import corrupt, final_names, model

REPO = Path(__file__).resolve().parents[2]
LOCAL_RELEASE = REPO / "releases" / "local.yaml"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplane.cli", "warmup", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def release_for(tmp_path: Path, model_dir: Path) -> Path:
    """A copy of the local release whose emu-tiny hashes are those of model_dir (written by the real tool)."""
    rel = tmp_path / "release.yaml"
    shutil.copy(LOCAL_RELEASE, rel)
    res = subprocess.run(
        [sys.executable, "-m", "inferplane.cli", "manifest", "hash-model", str(model_dir), "--update", str(rel), "--model", "emu-tiny"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    return rel


def test_warms_the_release_model_and_reports_json(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    rel = release_for(tmp_path, m.path)
    res = cli("--release", str(rel), "--model", "emu-tiny", "--source", str(m.path), "--dest", str(tmp_path / "d"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["changed"] and out["weights_manifest_sha256"] == m.expected.weights_manifest_sha256 and out["release"] == "local-2026.11.0"
    again = cli("--release", str(rel), "--model", "emu-tiny", "--source", str(m.path), "--dest", str(tmp_path / "d"))
    assert again.returncode == 0 and "copied 0, skipped 8, reused 0 of 8 files" in again.stdout


def test_a_corrupt_shard_exits_1_naming_it(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    rel = release_for(tmp_path, m.path)
    corrupt(m.path / m.shards[0])
    res = cli("--release", str(rel), "--model", "emu-tiny", "--source", str(m.path), "--dest", str(tmp_path / "d"))
    assert res.returncode == 1
    assert res.stderr.startswith(f"inferplane warmup: {m.shards[0]}: sha256 ") and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_input_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    res = cli("--release", str(LOCAL_RELEASE), "--model", "nope", "--dest", str(tmp_path))
    assert res.returncode == 2 and "models.nope: not in this release; pick one of emu-tiny" in res.stderr
    res = cli("--release", str(LOCAL_RELEASE), "--model", "emu-tiny", "--workers", "0", "--dest", str(tmp_path))
    assert res.returncode == 2 and "--workers: 0 is below 1" in res.stderr
    res = cli("--release", str(LOCAL_RELEASE), "--model", "emu-tiny", "--source", "relative/path", "--dest", str(tmp_path))
    assert res.returncode == 1 and "expected s3://BUCKET/PREFIX/ or an absolute path" in res.stderr


def test_a_run_killed_midway_resumes_and_finishes(tmp_path: Path) -> None:
    m = model(tmp_path / "src", shards=6, shard_bytes=1 << 20)
    rel = release_for(tmp_path, m.path)
    dest = tmp_path / "d"
    args = ["--release", str(rel), "--model", "emu-tiny", "--source", str(m.path), "--dest", str(dest)]
    # Throttled to ~3 s for 6 MiB, one file at a time: killed after the first verified file.
    proc = subprocess.Popen(
        [sys.executable, "-m", "inferplane.cli", "warmup", *args, "--workers", "1", "--max-mbps", "2", "--chunk-mib", "1"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                records = json.loads((dest / STATE_FILE).read_text())["files"]
            except (OSError, ValueError, KeyError):
                records = {}
            if any(r["status"] == "verified" for r in records.values()):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    records = json.loads((dest / STATE_FILE).read_text())["files"]
    verified = {r for r, v in records.items() if v["status"] == "verified"}
    # Nothing sits under its final name without a verified record, and all of it is intact.
    assert final_names(dest) == verified
    for name in verified:
        assert (dest / name).read_bytes() == (m.path / name).read_bytes()
    res = cli(*args, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["skipped"]) == verified and set(out["copied"]) == final_names(m.path) - verified
    assert final_names(dest) == final_names(m.path)


def test_s3_source_with_credentials_from_the_environment(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    rel = release_for(tmp_path, m.path)
    with moto_s3() as s3:
        upload_dir(s3.client(), "models", "emu-tiny", m.path)
        env = {**os.environ, **s3.env()}
        res = cli("--release", str(rel), "--model", "emu-tiny", "--dest", str(tmp_path / "d"), "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["source"] == f"s3://models/emu-tiny/ at {s3.endpoint}"
        env["AWS_SECRET_ACCESS_KEY"] = "wrong"
        bad = cli("--release", str(rel), "--model", "emu-tiny", "--dest", str(tmp_path / "d2"), env=env)
        assert bad.returncode == 1 and "SignatureDoesNotMatch" in bad.stderr


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    rel = release_for(tmp_path, m.path)
    res = cli("--release", str(rel), "--model", "emu-tiny", "--source", str(m.path), "--dest", str(tmp_path / "d"), "--check")
    assert res.returncode == 0 and "would copy 8 of 8 files" in res.stdout
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("tty", [True, False])
def test_progress_only_on_a_terminal(tmp_path: Path, tty: bool) -> None:
    m = model(tmp_path / "src")
    rel = release_for(tmp_path, m.path)
    args = [sys.executable, "-m", "inferplane.cli", "warmup", "--release", str(rel), "--model", "emu-tiny"]
    args += ["--source", str(m.path), "--dest", str(tmp_path / "d")]
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.run(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=follower, timeout=120)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(leader)
        err = b"".join(chunks).decode()
    else:
        done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
        proc, err = done, done.stderr
    assert proc.returncode == 0
    if tty:
        assert "warming emu-tiny" in err and f"verified {m.shards[0]}" in err.replace("  ", " ").replace("verified  ", "verified ")
    else:
        assert err == ""
