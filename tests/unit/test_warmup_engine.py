"""The warm-up engine on a POSIX source: one-pass verify, never an unverified file under its final
name, resumable and idempotent, space checked before copying."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from inferplane.node.warmup import (
    LISTING_FILE,
    STATE_FILE,
    Engine,
    Options,
    PosixSource,
    Throttle,
    WarmupError,
    _DestLock,
    open_source,
    warm_up,
)
from inferplane.node.weights import hash_model
from tests.unit.warmup_support import Model, corrupt, final_names, model, state_path, temp_names

# Small buffers so every shard crosses several pipeline parts.
OPT = Options(workers=3, chunk_bytes=128 * 1024)


@pytest.fixture
def m(tmp_path: Path) -> Model:
    return model(tmp_path / "src")


def run(m: Model, dest: Path, **kw: object) -> object:
    return warm_up(PosixSource(str(m.path)), str(dest), m.expected, "tiny", "rel-1", replace(OPT, **kw))  # type: ignore[arg-type]


def test_copies_every_file_and_the_copy_hashes_to_the_release(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    res = run(m, dest)
    h = hash_model(str(dest))
    assert (h["config_sha256"], h["tokenizer_sha256"], h["weights_manifest_sha256"]) == (
        m.expected.config_sha256,
        m.expected.tokenizer_sha256,
        m.expected.weights_manifest_sha256,
    )
    assert final_names(dest) == final_names(m.path)
    assert temp_names(dest) == set()
    for rel in final_names(m.path):
        assert (dest / rel).read_bytes() == (m.path / rel).read_bytes(), rel
    assert res.changed and res.listing and res.weights_manifest_sha256 == m.expected.weights_manifest_sha256  # type: ignore[attr-defined]
    assert res.bytes_copied == sum((m.path / r).stat().st_size for r in final_names(m.path))  # type: ignore[attr-defined]
    assert res.unpinned == ["model.safetensors.index.json", "tokenizer_config.json"]  # type: ignore[attr-defined]
    state = json.loads(state_path(dest).read_text())
    assert state["verified"]["weights_manifest_sha256"] == m.expected.weights_manifest_sha256
    assert {k for k, v in state["files"].items() if v["status"] == "verified"} == final_names(m.path)


def test_second_run_changes_nothing_not_even_the_state_file(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    run(m, dest)
    before = {p: os.stat(dest / p).st_mtime_ns for p in [*final_names(dest), STATE_FILE]}
    res = run(m, dest)
    assert not res.changed and res.copied == [] and sorted(res.skipped) == sorted(final_names(m.path))  # type: ignore[attr-defined]
    assert {p: os.stat(dest / p).st_mtime_ns for p in before} == before


def test_corrupt_shard_fails_naming_it_and_never_appears_under_its_name(m: Model, tmp_path: Path) -> None:
    bad = m.shards[1]
    corrupt(m.path / bad)
    dest = tmp_path / "dest"
    with pytest.raises(WarmupError) as err:
        run(m, dest)
    assert err.value.kind == "verify" and err.value.path == bad
    assert bad in str(err.value) and LISTING_FILE in str(err.value)
    assert bad not in final_names(dest)
    assert temp_names(dest) == set()
    # Whatever did land under a final name is byte-identical to a verified source file.
    for rel in final_names(dest):
        assert rel != bad and (dest / rel).read_bytes() == (m.path / rel).read_bytes()


def test_without_a_listing_a_corrupt_shard_fails_the_weights_manifest_and_no_shard_is_placed(tmp_path: Path) -> None:
    m = model(tmp_path / "src", listing=False)
    corrupt(m.path / m.shards[0])
    dest = tmp_path / "dest"
    with pytest.raises(WarmupError) as err:
        run(m, dest)
    assert err.value.kind == "verify" and "weights manifest" in str(err.value) and m.expected.weights_manifest_sha256 in str(err.value)
    assert not any(n.endswith(".safetensors") for n in final_names(dest))
    # The dropped shards are gone; files the release does not pin stay staged for the next run.
    assert temp_names(dest) == {".model.safetensors.index.json.inferplane-tmp", ".tokenizer_config.json.inferplane-tmp"}


def test_without_a_listing_a_good_model_verifies_as_a_whole(tmp_path: Path) -> None:
    m = model(tmp_path / "src", listing=False)
    res = run(m, tmp_path / "dest")
    assert not res.listing and sorted(res.copied) == sorted(final_names(m.path))  # type: ignore[attr-defined]
    assert hash_model(str(tmp_path / "dest"))["weights_manifest_sha256"] == m.expected.weights_manifest_sha256


@pytest.mark.parametrize("field_name,named", [("config_sha256", "config.json"), ("tokenizer_sha256", "tokenizer.json")])
def test_a_wrong_hash_in_the_release_fails_naming_the_file(m: Model, tmp_path: Path, field_name: str, named: str) -> None:
    wrong = replace(m.expected, **{field_name: "0" * 64})
    dest = tmp_path / "dest"
    with pytest.raises(WarmupError) as err:
        warm_up(PosixSource(str(m.path)), str(dest), wrong, options=OPT)
    assert err.value.kind == "verify" and err.value.path == named and f"the release's {field_name}" in str(err.value)
    assert named not in final_names(dest)


def test_a_wrong_weights_manifest_hash_in_the_release_fails_before_copying(m: Model, tmp_path: Path) -> None:
    wrong = replace(m.expected, weights_manifest_sha256="f" * 64)
    dest = tmp_path / "dest"
    with pytest.raises(WarmupError) as err:
        warm_up(PosixSource(str(m.path)), str(dest), wrong, options=OPT)
    assert err.value.kind == "verify" and err.value.path == LISTING_FILE
    assert final_names(dest) == set()


def test_not_a_sha256_in_the_release_is_an_input_error(m: Model, tmp_path: Path) -> None:
    with pytest.raises(WarmupError) as err:
        warm_up(PosixSource(str(m.path)), str(tmp_path / "d"), replace(m.expected, config_sha256="abc"), options=OPT)
    assert err.value.kind == "input" and "config_sha256" in str(err.value)


def test_free_space_shortage_fails_before_anything_is_written(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(WarmupError) as err:
        run(m, dest, reserve_bytes=free)
    assert err.value.kind == "space" and "nothing was copied" in str(err.value)
    assert final_names(dest) == set() and temp_names(dest) == set()


def test_a_run_that_dies_midway_resumes_without_copying_verified_files_again(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    seen: list[str] = []

    def die_after_two(rel: str, action: str, size: int, seconds: float) -> None:
        seen.append(rel)
        if len(seen) == 2:
            raise KeyboardInterrupt  # what an operator's Ctrl-C does mid-run

    with pytest.raises(KeyboardInterrupt):
        run(m, dest, workers=1, on_file=die_after_two)
    # The two reported files are in place; a file the worker had already started may finish
    # too (verified) before the interrupt reaches the pool, but no file runs past it.
    done = final_names(dest)
    assert set(seen) <= done and len(done) < len(final_names(m.path))
    res = run(m, dest)
    assert sorted(res.skipped) == sorted(done)  # type: ignore[attr-defined]
    assert sorted(res.copied) == sorted(final_names(m.path) - done)  # type: ignore[attr-defined]
    assert hash_model(str(dest))["weights_manifest_sha256"] == m.expected.weights_manifest_sha256


def test_staged_shards_of_an_interrupted_run_are_reused(tmp_path: Path) -> None:
    m = model(tmp_path / "src", listing=False)
    dest = tmp_path / "dest"
    staged: list[str] = []

    def die_after_a_shard(rel: str, action: str, size: int, seconds: float) -> None:
        if action == "staged" and rel.endswith(".safetensors"):
            staged.append(rel)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(m, dest, workers=1, on_file=die_after_a_shard)
    assert staged and not any(n.endswith(".safetensors") for n in final_names(dest))
    res = run(m, dest)
    assert res.reused == staged and staged[0] not in res.copied  # type: ignore[attr-defined]
    assert hash_model(str(dest))["weights_manifest_sha256"] == m.expected.weights_manifest_sha256


def test_partial_temp_files_of_a_killed_run_are_discarded(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / f".{m.shards[0]}.inferplane-tmp").write_bytes(b"half a shard")
    run(m, dest)
    assert temp_names(dest) == set()
    assert (dest / m.shards[0]).read_bytes() == (m.path / m.shards[0]).read_bytes()


def test_a_changed_source_file_is_copied_again(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    run(m, dest)
    shard = m.path / m.shards[0]
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    res = run(m, dest)
    assert res.copied == [m.shards[0]] and res.changed  # type: ignore[attr-defined]


def test_a_tampered_destination_file_is_replaced(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    run(m, dest)
    (dest / m.shards[2]).write_bytes(b"truncated")
    res = run(m, dest)
    assert res.copied == [m.shards[2]]  # type: ignore[attr-defined]
    assert (dest / m.shards[2]).read_bytes() == (m.path / m.shards[2]).read_bytes()


def test_recheck_finds_bit_rot_that_keeps_size_and_mtime(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    run(m, dest)
    target = dest / m.shards[0]
    st = target.stat()
    corrupt(target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run(m, dest).copied == []  # type: ignore[attr-defined]
    assert run(m, dest, recheck=True).copied == [m.shards[0]]  # type: ignore[attr-defined]
    assert (dest / m.shards[0]).read_bytes() == (m.path / m.shards[0]).read_bytes()


def test_a_stray_shard_in_dest_is_refused_not_deleted(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "model-00009-of-00009.safetensors").write_bytes(b"old revision")
    with pytest.raises(WarmupError) as err:
        run(m, dest)
    assert err.value.kind == "input" and err.value.path == "model-00009-of-00009.safetensors"
    assert (dest / "model-00009-of-00009.safetensors").read_bytes() == b"old revision"


def test_a_second_run_on_the_same_dest_is_refused_while_the_first_holds_it(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with _DestLock(str(dest)), pytest.raises(WarmupError) as err:
        run(m, dest)
    assert err.value.kind == "busy" and str(os.getpid()) in str(err.value)


def test_check_mode_plans_and_writes_nothing(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    res = run(m, dest, check_only=True)
    assert res.changed and sorted(res.would_copy) == sorted(final_names(m.path))  # type: ignore[attr-defined]
    assert not dest.exists()
    run(m, dest)
    res = run(m, dest, check_only=True)
    assert not res.changed and res.would_copy == []  # type: ignore[attr-defined]


def test_listing_and_source_must_agree_on_the_shards(m: Model, tmp_path: Path) -> None:
    (m.path / "extra.safetensors").write_bytes(b"not released")
    with pytest.raises(WarmupError) as err:
        run(m, tmp_path / "d1")
    assert err.value.path == "extra.safetensors" and LISTING_FILE in str(err.value)
    (m.path / "extra.safetensors").unlink()
    (m.path / m.shards[0]).unlink()
    with pytest.raises(WarmupError) as err:
        run(m, tmp_path / "d2")
    assert err.value.kind == "source" and err.value.path == m.shards[0]


def test_a_directory_that_is_not_a_model_is_named(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "config.json").write_text("{}")
    m = model(tmp_path / "ref")
    with pytest.raises(WarmupError) as err:
        warm_up(PosixSource(str(tmp_path / "src")), str(tmp_path / "d"), m.expected, options=OPT)
    assert err.value.kind == "source" and "tokenizer.json missing" in str(err.value)
    with pytest.raises(WarmupError) as err:
        warm_up(PosixSource(str(tmp_path / "nope")), str(tmp_path / "d"), m.expected, options=OPT)
    assert "not a directory" in str(err.value)


def test_excluded_files_are_not_copied(m: Model, tmp_path: Path) -> None:
    res = run(m, tmp_path / "dest", exclude=("tokenizer_config.json",))
    assert "tokenizer_config.json" not in final_names(tmp_path / "dest") and "tokenizer_config.json" not in res.copied  # type: ignore[attr-defined]


def test_progress_sees_every_copied_byte_once(m: Model, tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    files: list[str] = []
    res = run(
        m,
        tmp_path / "dest",
        on_progress=lambda rel, n: seen.__setitem__(rel, seen.get(rel, 0) + n),
        on_file=lambda rel, action, size, s: files.append(rel),
    )
    assert seen == {rel: (m.path / rel).stat().st_size for rel in final_names(m.path) if (m.path / rel).stat().st_size}
    assert sorted(files) == sorted(res.copied)  # type: ignore[attr-defined]


def test_preread_reads_every_final_file(m: Model, tmp_path: Path) -> None:
    res = run(m, tmp_path / "dest", preread=True)
    assert res.preread_bytes == sum((m.path / r).stat().st_size for r in final_names(m.path))  # type: ignore[attr-defined]


def test_an_unreadable_state_file_costs_a_copy_not_a_failure(m: Model, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    run(m, dest)
    state_path(dest).write_text("{not json")
    res = run(m, dest)
    assert res.changed and res.notes and "unreadable" in res.notes[0]  # type: ignore[attr-defined]
    assert json.loads(state_path(dest).read_text())["verified"]["weights_manifest_sha256"] == m.expected.weights_manifest_sha256


def test_nested_directories_keep_their_layout(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    (m.path / "original").mkdir()
    (m.path / "original" / "params.json").write_text("{}")
    run(m, tmp_path / "dest")
    assert (tmp_path / "dest" / "original" / "params.json").read_text() == "{}"


def test_throttle_paces_reads_at_the_given_rate() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttle = Throttle(1e6, clock=lambda: now[0], sleep=sleep)
    for _ in range(4):
        throttle.take(250_000)
    # 1 MB at 1 MB/s: the first quarter goes at once, the last one starts 0.75 s later.
    assert sum(slept) == pytest.approx(0.75)
    unthrottled = Throttle(0, clock=lambda: now[0], sleep=sleep)
    unthrottled.take(10**9)
    assert sum(slept) == pytest.approx(0.75)


def test_source_uris(tmp_path: Path) -> None:
    assert isinstance(open_source(str(tmp_path)), PosixSource)
    assert open_source(f"file://{tmp_path}").describe() == str(tmp_path)  # type: ignore[attr-defined]
    with pytest.raises(WarmupError) as err:
        open_source("models/emu-tiny")
    assert err.value.kind == "input"
    s3 = open_source("s3://models/emu-tiny", env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert s3.describe() == "s3://models/emu-tiny/ at http://127.0.0.1:9"


def test_engine_rejects_nonsense_options(m: Model, tmp_path: Path) -> None:
    with pytest.raises(WarmupError):
        Engine(PosixSource(str(m.path)), str(tmp_path), m.expected, options=Options(workers=0))
