"""`inferplane warmup --release FILE --model NAME [--source URI] [--dest DIR] [--workers N] [--preread] [--max-mbps N]`

Copies one model of a release into a node-local directory and verifies it in the same pass
(inferplane.node.warmup, the engine the Ansible module runs). Exit 0 when DEST holds the
verified model, 1 when the warm-up failed (the message names the file), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from inferplane.errors import ConfigError

if TYPE_CHECKING:
    from inferplane.node.warmup import Result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--release", required=True, metavar="FILE", help="release manifest pinning the model's hashes")
    parser.add_argument("--model", required=True, metavar="NAME", help="model name in the release")
    parser.add_argument(
        "--source", metavar="URI", help="s3://BUCKET/PREFIX/ or a POSIX path (NFS, Alluxio FUSE); default: the model's source"
    )
    parser.add_argument("--dest", metavar="DIR", help="node-local directory the engine loads; default: the model's path")
    parser.add_argument("--workers", type=int, default=4, metavar="N", help="files copied at once (default 4)")
    parser.add_argument("--streams", type=int, default=0, metavar="N", help="concurrent reads per file (default: 4 for S3, 1 for POSIX)")
    parser.add_argument("--chunk-mib", type=int, default=16, metavar="N", help="read/write buffer size (default 16 MiB)")
    parser.add_argument("--max-mbps", type=float, default=0.0, metavar="N", help="cap reads at N megabytes (10^6 bytes) per second")
    parser.add_argument("--preread", action="store_true", help="read the final files once so the engine's load hits the page cache")
    parser.add_argument("--reserve-gib", type=float, default=0.0, metavar="N", help="leave N GiB free on DEST after the copy")
    parser.add_argument("--recheck", action="store_true", help="rehash files already in DEST instead of trusting their records")
    parser.add_argument("--check", action="store_true", help="plan and check free space only; write nothing")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="source paths not to copy (repeatable)")
    parser.add_argument("--s3-endpoint", metavar="URL", help="S3 endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)")
    parser.add_argument("--s3-region", metavar="REGION", help="signing region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)")
    parser.add_argument(
        "--s3-addressing", choices=("auto", "path", "virtual"), default="auto", help="bucket in the path or in the host name"
    )
    parser.add_argument("--ca-file", metavar="PEM", help="CA bundle for an HTTPS endpoint with a private CA")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


class Progress:
    """Per-file and total progress on a terminal, redrawn in place twice a second."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.total = 0
        self.files = 0
        self.files_done = 0
        self.done = 0
        self.current: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def on_progress(self, rel: str, n: int) -> None:
        with self.lock:
            self.done += n
            self.current[rel] = self.current.get(rel, 0) + n

    def on_plan(self, sizes: dict[str, int]) -> None:
        with self.lock:
            self.sizes = sizes
            self.files, self.total = len(sizes), sum(sizes.values())
            self.t0 = time.monotonic()

    def on_file(self, rel: str, action: str, size: int, seconds: float) -> None:
        with self.lock:
            self.current.pop(rel, None)
            self.files_done += 1
            rate = size / seconds / 1e9 if seconds > 0 else 0.0
            self.out.write(f"\r\033[K  {action:8s} {rel}  {_gib(size)} in {seconds:.1f} s ({rate:.2f} GB/s)\n")

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            with self.lock:
                elapsed = time.monotonic() - self.t0
                rate = self.done / elapsed / 1e9 if elapsed > 0 else 0.0
                active = ", ".join(f"{rel} {100 * n // max(1, self.sizes.get(rel, 1))}%" for rel, n in sorted(self.current.items())[:3])
                pct = 100 * self.done // max(1, self.total)
                self.out.write(
                    f"\r\033[K  {_gib(self.done)} of {_gib(self.total)} ({pct}%), {self.files_done}/{self.files} files, "
                    f"{rate:.2f} GB/s  [{active}]"
                )
                self.out.flush()

    def __enter__(self) -> Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.out.write("\r\033[K")
        self.out.flush()


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.1f} MiB"


def run(args: argparse.Namespace) -> int:
    # Imported here: `inferplane --help` imports every command module.
    from inferplane.manifest import load_release
    from inferplane.node.warmup import Expected, Options, WarmupError, open_source, warm_up

    release = load_release(args.release)
    if args.model not in release.models:
        raise ConfigError(args.release, [f"models.{args.model}: not in this release; pick one of {', '.join(sorted(release.models))}"])
    model = release.models[args.model]
    problems = []
    for flag, value, low in (("--workers", args.workers, 1), ("--streams", args.streams, 0), ("--chunk-mib", args.chunk_mib, 1)):
        if value < low:
            problems.append(f"{flag}: {value} is below {low}")
    if args.max_mbps < 0 or args.reserve_gib < 0:
        problems.append("--max-mbps/--reserve-gib: must not be negative")
    if problems:
        raise ConfigError("warmup", problems)
    source_uri = args.source or model.source
    dest = args.dest or model.path
    expected = Expected(model.config_sha256, model.tokenizer_sha256, model.weights_manifest_sha256)
    show = not args.quiet and not args.json and sys.stderr.isatty()
    try:
        source = open_source(
            source_uri,
            s3_endpoint=args.s3_endpoint or "",
            s3_region=args.s3_region or "",
            addressing=args.s3_addressing,
            ca_file=args.ca_file or "",
        )
        progress = Progress(sys.stderr)
        options = Options(
            workers=args.workers,
            streams=args.streams,
            chunk_bytes=args.chunk_mib << 20,
            max_bytes_per_s=args.max_mbps * 1e6,
            preread=args.preread,
            reserve_bytes=int(args.reserve_gib * (1 << 30)),
            recheck=args.recheck,
            check_only=args.check,
            exclude=tuple(args.exclude),
            on_progress=progress.on_progress if show else None,
            on_file=progress.on_file if show else None,
            on_plan=progress.on_plan if show else None,
        )
        if show:
            print(f"warming {args.model} ({release.release}) from {source.describe()} into {os.path.abspath(dest)}", file=sys.stderr)
            with progress:
                result = warm_up(source, dest, expected, args.model, release.release, options)
        else:
            result = warm_up(source, dest, expected, args.model, release.release, options)
    except WarmupError as exc:
        if args.json:
            print(json.dumps({"failed": True, "kind": exc.kind, "path": exc.path, "msg": str(exc)}, indent=2))
        print(f"inferplane warmup: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        return 0
    print(summary(result, args.check))
    return 0


def summary(result: Result, check: bool) -> str:
    r = result.to_dict()
    if check:
        return (
            f"{r['model']}: would copy {len(r['would_copy'])} of {r['files']} files ({_gib(r['bytes_needed'])} needed, "
            f"{_gib(r['bytes_free'])} free in {r['dest']})"
        )
    lines = [
        f"{r['model']} ({r['release']}) in {r['dest']}: verified "
        f"(config.json, tokenizer.json, weights manifest {r['weights_manifest_sha256'][:12]}...)",
        f"  copied {len(r['copied'])}, skipped {len(r['skipped'])}, reused {len(r['reused'])} of {r['files']} files; "
        f"{_gib(r['bytes_copied'])} in {r['seconds']:.2f} s ({r['gb_per_s']:.2f} GB/s)",
    ]
    if r["preread_bytes"]:
        lines.append(f"  pre-read {_gib(r['preread_bytes'])} into the page cache in {r['preread_seconds']:.2f} s")
    if r["unpinned"]:
        lines.append(f"  not pinned by the release (copied intact): {', '.join(r['unpinned'])}")
    if not r["listing"]:
        lines.append("  the source publishes no weights.sha256: shards were verified together, a bad one could not be named")
    lines.extend(f"  note: {n}" for n in r["notes"])
    return "\n".join(lines)
