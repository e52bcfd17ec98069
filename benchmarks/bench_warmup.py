"""Warm-up throughput: the engine against the naive way and against a plain copy, side by side.

Same generated safetensors files for every variant, run interleaved over several rounds (median
reported), each variant starting from the same cache state and ending with its data on disk:

- engine: inferplane.node.warmup (read, sha256, write in one pass; fsync per file; verified
  against the release hashes, per shard through weights.sha256);
- naive: ``cp -r`` then ``sha256sum`` of every copied file, then ``sync``;
- limit: the same bytes copied without any hashing, then ``sync``: ``cp -r`` (one file at a
  time) and ``xargs -P`` of ``cp`` (as many files at once as the engine's workers). The goal is
  measured against the faster of the two.

S3 (moto_server, signatures enforced, on this machine): engine; naive = boto3 ``download_file``
of one file after the other, then ``sha256sum``; limit = boto3 ``download_file`` of all files at
once (s3transfer's ranged GETs), no hashing. moto is a Python server sharing the cores with the
client, so the S3 rows measure moto as much as the clients.

Rounds: 3 (quick: 1), or BENCH_WARMUP_ROUNDS. Cache state: with root, ``/proc/sys/vm/drop_caches`` is written before every variant (cold
source); otherwise every variant starts with the source read once (warm source).
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inferplane.node.warmup import LISTING_FILE, Expected, Options, open_source, warm_up
from inferplane.node.weights import hash_model, listing_text
from inferplane.testing.tiny_model import make_model

WORKERS = 4
GOAL_VS_LIMIT = 0.9
GOAL_VS_NAIVE = 1.8


def _drop_caches() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def _read_all(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb", buffering=0) as fh:
                while fh.read(16 << 20):
                    pass


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


class Bench:
    def __init__(self, work: Path, src: Path, size: int, cold: bool) -> None:
        self.work = work
        self.src = src
        self.size = size
        self.cold = cold
        self.dst = work / "dst"

    def reset(self) -> None:
        shutil.rmtree(self.dst, ignore_errors=True)
        subprocess.run(["sync"], check=True)
        if self.cold:
            _drop_caches()
        else:
            _read_all(self.src)

    def time(self, fn: Callable[[], None]) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process and the commands it ran)."""
        self.reset()
        c0 = _cpu()
        t0 = time.monotonic()
        fn()
        return time.monotonic() - t0, _cpu() - c0


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _sh(cmd: str) -> None:
    subprocess.run(["bash", "-c", f"set -euo pipefail; {cmd}"], check=True, stdout=subprocess.DEVNULL)


def _posix_variants(b: Bench, expected: Expected) -> dict[str, Callable[[], None]]:
    src, dst = str(b.src), str(b.dst)

    def engine() -> None:
        warm_up(open_source(src), dst, expected, options=Options(workers=WORKERS))

    def naive() -> None:
        _sh(f"cp -r {src} {dst} && find {dst} -type f -exec sha256sum {{}} + && sync")

    def limit_cp() -> None:
        _sh(f"cp -r {src} {dst} && sync")

    def limit_parallel() -> None:
        _sh(f"mkdir -p {dst} && find {src} -maxdepth 1 -type f -print0 | xargs -0 -P {WORKERS} -I{{}} cp {{}} {dst}/ && sync")

    return {"engine": engine, "naive": naive, "limit: cp": limit_cp, f"limit: cp x{WORKERS}": limit_parallel}


def _s3_variants(b: Bench, expected: Expected, s3: Any, keys: list[str]) -> dict[str, Callable[[], None]]:
    client = s3.client()
    dst = b.dst

    def engine() -> None:
        source = open_source("s3://bench/model/", s3_endpoint=s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, env={})
        warm_up(source, str(dst), expected, options=Options(workers=WORKERS))

    def download(key: str) -> None:
        client.download_file("bench", key, str(dst / key.removeprefix("model/")))

    def naive() -> None:
        dst.mkdir()
        for key in keys:
            download(key)
        _sh(f"find {dst} -type f -exec sha256sum {{}} + && sync")

    def limit() -> None:
        dst.mkdir()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(download, keys))
        _sh("sync")

    return {"engine": engine, "naive": naive, f"limit: boto3 x{WORKERS}": limit}


def _measure(b: Bench, variants: dict[str, Callable[[], None]], rounds: int) -> dict[str, tuple[float, float]]:
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        # Rotate the order so no variant always runs first or last.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(b.time(variants[name]))
    return {name: (statistics.median(w for w, _ in rs), statistics.median(c for _, c in rs)) for name, rs in runs.items()}


def _rows(source: str, medians: dict[str, tuple[float, float]], size: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    gbps = {name: size / wall / 1e9 for name, (wall, _) in medians.items()}
    limit = max(v for k, v in gbps.items() if k.startswith("limit"))
    rows = []
    for name, (wall, cpu) in medians.items():
        rows.append(
            {
                "source": source,
                "variant": name,
                "seconds": f"{wall:.2f}",
                "GB/s": f"{gbps[name]:.2f}",
                "x limit": f"{gbps[name] / limit:.2f}",
                "x naive": f"{gbps[name] / gbps['naive']:.2f}",
                "CPU s/GB": f"{cpu / (size / 1e9):.2f}",
            }
        )
    return rows, {"vs_limit": gbps["engine"] / limit, "vs_naive": gbps["engine"] / gbps["naive"]}


def _model(root: Path, shards: int, shard_bytes: int) -> tuple[Path, Expected, int]:
    path = make_model(root, shards=shards, shard_bytes=shard_bytes, seed="bench")
    h = hash_model(str(path))
    (path / LISTING_FILE).write_text(listing_text(h["files"]))  # type: ignore[arg-type]
    expected = Expected(str(h["config_sha256"]), str(h["tokenizer_sha256"]), str(h["weights_manifest_sha256"]))
    size = sum(p.stat().st_size for p in _files(path))
    return path, expected, size


def run(quick: bool) -> dict[str, Any]:
    shards, shard_bytes = (4, 64 << 20) if quick else (8, 512 << 20)
    s3_shards, s3_shard_bytes = (2, 64 << 20) if quick else (4, 256 << 20)
    rounds = int(os.environ.get("BENCH_WARMUP_ROUNDS", "1" if quick else "3"))
    work = Path(tempfile.mkdtemp(prefix="bench-warmup-", dir=os.environ.get("BENCH_WARMUP_DIR")))
    load_before = os.getloadavg()
    notes = []
    try:
        cold = _drop_caches()
        src, expected, size = _model(work / "src", shards, shard_bytes)
        bench = Bench(work, src, size, cold)
        posix_rows, posix_ratio = _rows("posix", _measure(bench, _posix_variants(bench, expected), rounds), size)

        s3_rows: list[dict[str, Any]] = []
        s3_ratio: dict[str, float] = {}
        if importlib.util.find_spec("moto") and importlib.util.find_spec("boto3"):
            from inferplane.testing.s3 import moto_s3, upload_dir

            s3_src, s3_expected, s3_size = _model(work / "s3src", s3_shards, s3_shard_bytes)
            with moto_s3() as s3:
                keys = upload_dir(s3.client(), "bench", "model", s3_src)
                s3_bench = Bench(work, s3_src, s3_size, cold)
                s3_rows, s3_ratio = _rows("s3 (moto)", _measure(s3_bench, _s3_variants(s3_bench, s3_expected, s3, keys), rounds), s3_size)
        else:
            notes.append("S3 rows skipped: moto[server] and boto3 are not installed here (`make venv` installs them).")
        # The engine's copy must be the model, byte for byte (checked once, outside the timings).
        warm_up(open_source(str(src)), str(work / "check"), expected, options=Options(workers=WORKERS))
        copied = hash_model(str(work / "check"))["weights_manifest_sha256"]
        if copied != expected.weights_manifest_sha256:
            raise RuntimeError(f"the engine's copy hashes to {copied}, not {expected.weights_manifest_sha256}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    met = posix_ratio["vs_limit"] >= GOAL_VS_LIMIT and posix_ratio["vs_naive"] >= GOAL_VS_NAIVE
    notes.append(
        f"POSIX: {shards} x {shard_bytes >> 20} MiB ({size / 1e9:.2f} GB); S3: {s3_shards} x {s3_shard_bytes >> 20} MiB. "
        f"Median of {rounds} interleaved round(s). Engine: {WORKERS} workers, 16 MiB buffers."
    )
    notes.append(
        "Cache: page cache dropped before every variant (cold source)."
        if bench.cold
        else "Cache: /proc/sys/vm/drop_caches not writable; every variant started with the source read once (warm source)."
    )
    notes.append(
        f"Machine: {len(os.sched_getaffinity(0))} usable CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after. "
        "CPU s/GB: user+system time of the client and the commands it ran (moto_server's own CPU is not counted)."
    )
    notes.append(
        f"Goal (POSIX): engine >= {GOAL_VS_LIMIT}x the limit and >= {GOAL_VS_NAIVE}x naive: "
        f"{posix_ratio['vs_limit']:.2f}x and {posix_ratio['vs_naive']:.2f}x -> {'met' if met else 'MISSED'}. "
        + (f"S3: {s3_ratio['vs_limit']:.2f}x the limit, {s3_ratio['vs_naive']:.2f}x naive." if s3_ratio else "")
    )
    return {
        "title": "Weight warm-up: engine vs naive (cp + sha256sum) vs plain copy",
        "rows": posix_rows + s3_rows,
        "notes": "\n".join(notes),
        "goal_met": met,
        "posix": posix_ratio,
        "s3": s3_ratio,
    }
