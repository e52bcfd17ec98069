"""The CLI: help lists subcommands, bad input exits 2 with one line per problem, never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inferplane.cli import SUBCOMMANDS
from inferplane.testing.tiny_model import make_model

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferplane.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_help_lists_every_subcommand() -> None:
    out = cli("--help").stdout
    for path, _, _ in SUBCOMMANDS:
        assert path.split()[0] in out


def test_manifest_check_passes_on_shipped_releases() -> None:
    res = cli("manifest", "check", *map(str, sorted((REPO / "releases").glob("*.yaml"))))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(": ok") == len(list((REPO / "releases").glob("*.yaml")))


def test_manifest_check_broken_copy_exits_2_with_one_line_errors(tmp_path: Path) -> None:
    text = (REPO / "releases" / "2026.11.0.yaml").read_text()
    import re

    broken = re.sub(r"inferplane/sglang-worker@sha256:[0-9a-f]{64}", "inferplane/sglang-worker:latest", text)
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    res = cli("manifest", "check", str(path))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "  runtime.sglang_image: tag 'latest' is not allowed; pin a digest (repo@sha256:...)" in res.stderr.splitlines()


@pytest.mark.parametrize("garbage", ["{", "- [", "\x00", "key: [unclosed"])
def test_unparseable_yaml_is_a_clean_error(tmp_path: Path, garbage: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(garbage)
    res = cli("manifest", "check", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_spec_check_unknown_stack_names_the_known_ones() -> None:
    res = cli("spec", "check", "--stack", "nope")
    assert res.returncode == 2
    assert "no such stack 'nope'; known stacks:" in res.stderr and "prod" in res.stderr


def test_spec_check_passes_for_prod() -> None:
    res = cli("spec", "check", "--stack", "prod")
    assert res.returncode == 0, res.stderr
    assert "stack prod: ok" in res.stdout


def test_hash_model_update_rewrites_only_that_model(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m", shards=1, shard_bytes=4096, seed="update-test")
    release = tmp_path / "release.yaml"
    shutil.copy(REPO / "releases" / "local.yaml", release)
    before = release.read_text()
    res = cli("manifest", "hash-model", str(model), "--update", str(release), "--model", "emu-tiny")
    assert res.returncode == 0, res.stderr
    after = release.read_text()
    assert after != before
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    # The generator's tokenizer does not depend on the seed, so its line stays as it was.
    assert {a.split(":")[0].strip() for a, _ in changed} == {"config_sha256", "weights_manifest_sha256"}
    hashes = dict(line.split(": ") for line in res.stdout.splitlines() if line.endswith(tuple("0123456789abcdef")) and ": " in line)
    for field in ("config_sha256", "tokenizer_sha256", "weights_manifest_sha256"):
        assert f"{field}: {hashes[field]}" in after
    assert cli("manifest", "check", str(release)).returncode == 0


def test_hash_model_on_missing_dir_exits_2(tmp_path: Path) -> None:
    res = cli("manifest", "hash-model", str(tmp_path / "absent"))
    assert res.returncode == 2 and "not a directory" in res.stderr
