"""Model hashing is exactly the seed's coreutils procedure."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from inferplane.node.weights import hash_model, listing_text
from inferplane.testing.tiny_model import make_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_model(tmp_path_factory.mktemp("m") / "model", shards=3, shard_bytes=200_000)
    sub = path / "extra"
    sub.mkdir()
    shutil.copy(path / "model-00001-of-00003.safetensors", sub / "a.safetensors")
    return path


def coreutils_listing(model_dir: Path) -> str:
    out = subprocess.run(
        "find . -name '*.safetensors' -exec sha256sum {} \\; | LC_ALL=C sort",
        shell=True,
        cwd=model_dir,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def sha256sum(data: str) -> str:
    return subprocess.run(["sha256sum"], input=data, capture_output=True, text=True, check=True).stdout.split()[0]


def test_weights_manifest_hash_equals_coreutils(model: Path) -> None:
    result = hash_model(str(model))
    listing = coreutils_listing(model)
    assert listing_text(result["files"]) == listing  # type: ignore[arg-type]
    assert result["weights_manifest_sha256"] == sha256sum(listing)


def test_config_and_tokenizer_hashes_equal_coreutils(model: Path) -> None:
    result = hash_model(str(model))
    for name, field in (("config.json", "config_sha256"), ("tokenizer.json", "tokenizer_sha256")):
        expected = subprocess.run(["sha256sum", name], cwd=model, capture_output=True, text=True, check=True).stdout.split()[0]
        assert result[field] == expected


def test_generated_local_model_matches_the_local_release(tmp_path: Path) -> None:
    from inferplane.manifest import load_release

    release = load_release(Path(__file__).resolve().parents[2] / "releases" / "local.yaml")
    pinned = release.models["emu-tiny"]
    result = hash_model(str(make_model(tmp_path / "emu")))
    assert (result["config_sha256"], result["tokenizer_sha256"], result["weights_manifest_sha256"]) == (
        pinned.config_sha256,
        pinned.tokenizer_sha256,
        pinned.weights_manifest_sha256,
    )
    assert result["size_bytes"] == pinned.size_bytes


def test_missing_weights_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        hash_model(str(tmp_path))
