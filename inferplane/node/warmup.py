"""Weight warm-up: copy a model from an object store or a POSIX mount into a node-local cache,
reading, hashing and writing every byte in one pass, and verifying it against the release.

Runs on nodes (stdlib only, shipped to hosts as Ansible module_utils) and behind
``inferplane warmup``. One run, step by step:

1. take an exclusive lock on DEST (a second run on the same node waits for nothing: it fails);
2. list the source (S3 ListObjectsV2 or a directory walk) and, when the source publishes one,
   read the weights listing (``weights.sha256``, the seed's ``sha256sum | sort`` output whose own
   sha256 is the release's ``weights_manifest_sha256``): it gives every shard its own expected
   hash, so a corrupt shard is named, not just detected;
3. plan: a file whose verified record (size, mtime, sha256, source identity) in the state file
   ``DEST/.inferplane-warmup.json`` still matches is skipped; everything else is copied;
4. check free space for what will be copied, before the first byte is written;
5. copy files in parallel; each file goes through a pipeline (reader threads -> a writer thread
   and the hashing thread, sharing page-aligned buffers) into a hidden temp name, is fsynced,
   and is renamed to its final name only once its hash matches. A file with no hash of its own
   (shards without a listing, files the release does not pin) stays under its temp name until
   the whole model has verified;
6. recompute ``weights_manifest_sha256`` from the per-file hashes and compare;
7. optionally read the final files once so the engine's load hits the page cache.

A mismatch raises WarmupError naming the file; no unverified file is ever left under its final
name. Killing a run at any point leaves verified files with their records; the next run
continues from there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import hmac
import http.client
import json
import mmap
import os
import socket
import ssl
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .weights import WEIGHT_SUFFIX, manifest_sha256

STATE_FILE = ".inferplane-warmup.json"
LOCK_FILE = ".inferplane-warmup.lock"
TMP_SUFFIX = ".inferplane-tmp"
# Optional, published next to the weights by whoever uploads the model (see README.md).
LISTING_FILE = "weights.sha256"
STATE_VERSION = 1

MIB = 1 << 20
DEFAULT_CHUNK = 16 * MIB
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Which release field pins which file; weight shards are pinned through the listing.
PINNED_FIELDS = {"config.json": "config_sha256", "tokenizer.json": "tokenizer_sha256"}


class WarmupError(Exception):
    """A run that cannot finish. ``kind`` is one of: input, source, verify, space, busy, io."""

    def __init__(self, kind: str, message: str, path: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path


@dataclass(frozen=True)
class Expected:
    """The model hashes of the release manifest."""

    config_sha256: str
    tokenizer_sha256: str
    weights_manifest_sha256: str

    def check(self) -> None:
        for name in ("config_sha256", "tokenizer_sha256", "weights_manifest_sha256"):
            value = getattr(self, name)
            if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
                raise WarmupError("input", f"{name}: '{value}' is not a sha256 (64 lowercase hex); take it from the release manifest")


@dataclass(frozen=True)
class SourceFile:
    rel: str  # path under the model root, '/'-separated, no leading './'
    size: int
    identity: str  # changes whenever the object changes: S3 ETag, or size+mtime of a POSIX file


@dataclass
class Options:
    workers: int = 4  # files copied at once
    streams: int = 0  # concurrent reads per file; 0 = the source's default
    chunk_bytes: int = DEFAULT_CHUNK
    max_bytes_per_s: float = 0.0  # 0 = unthrottled
    preread: bool = False
    reserve_bytes: int = 0  # space to leave free on DEST after the copy
    recheck: bool = False  # rehash files already in DEST instead of trusting their records
    check_only: bool = False  # plan and check space, write nothing
    exclude: tuple[str, ...] = ()  # fnmatch patterns of source paths not to copy
    on_progress: Callable[[str, int], None] | None = None  # (relative path, bytes just hashed)
    on_file: Callable[[str, str, int, float], None] | None = None  # (relative path, action, bytes, seconds)
    on_plan: Callable[[dict[str, int]], None] | None = None  # {relative path: size} of what will be copied, before the first byte


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


class Reader:
    """Reads byte ranges of source files. One per thread: an S3 reader owns a connection."""

    def read_into(self, f: SourceFile, offset: int, view: memoryview) -> None:
        raise NotImplementedError

    def done(self, f: SourceFile) -> None:
        """The file is finished (or abandoned) by this reader."""

    def close(self) -> None:
        """Release connections."""


class Source:
    kind = "?"
    default_streams = 1

    def describe(self) -> str:
        raise NotImplementedError

    def list_files(self) -> list[SourceFile]:
        raise NotImplementedError

    def read_small(self, f: SourceFile) -> bytes:
        reader = self.reader()
        try:
            buf = bytearray(f.size)
            if f.size:
                reader.read_into(f, 0, memoryview(buf))
            return bytes(buf)
        finally:
            reader.done(f)
            reader.close()

    def reader(self) -> Reader:
        raise NotImplementedError


def _is_own_name(name: str) -> bool:
    return name in (STATE_FILE, LOCK_FILE) or name.endswith(TMP_SUFFIX)


class PosixSource(Source):
    """A directory: local disk, NFS, or an Alluxio FUSE mount."""

    kind = "posix"
    # One sequential reader per file keeps the kernel's readahead effective; parallelism
    # comes from copying several files at once.
    default_streams = 1

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def describe(self) -> str:
        return self.root

    def list_files(self) -> list[SourceFile]:
        if not os.path.isdir(self.root):
            raise WarmupError("source", f"source {self.root}: not a directory; check the mount (NFS, Alluxio FUSE) and the path")
        found = []
        for top, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if _is_own_name(name):
                    continue
                path = os.path.join(top, name)
                st = os.stat(path)
                rel = os.path.relpath(path, self.root).replace(os.sep, "/")
                found.append(SourceFile(rel, st.st_size, f"{st.st_size}:{st.st_mtime_ns}"))
        return sorted(found, key=lambda f: f.rel)

    def reader(self) -> Reader:
        return _PosixReader(self.root)


class _PosixReader(Reader):
    def __init__(self, root: str) -> None:
        self.root = root
        self.fds: dict[str, int] = {}

    def _fd(self, f: SourceFile) -> int:
        fd = self.fds.get(f.rel)
        if fd is None:
            fd = os.open(os.path.join(self.root, f.rel), os.O_RDONLY | os.O_CLOEXEC)
            st = os.fstat(fd)
            if f"{st.st_size}:{st.st_mtime_ns}" != f.identity:
                os.close(fd)
                raise WarmupError("source", f"{f.rel}: changed in the source since it was listed; run again", f.rel)
            _fadvise(fd, 0, 0, "POSIX_FADV_SEQUENTIAL")
            self.fds[f.rel] = fd
        return fd

    def read_into(self, f: SourceFile, offset: int, view: memoryview) -> None:
        fd = self._fd(f)
        got = 0
        while got < len(view):
            n = os.preadv(fd, [view[got:]], offset + got)
            if n == 0:
                raise WarmupError(
                    "source", f"{f.rel}: source file ended at {offset + got} of {f.size} bytes (truncated while copying)", f.rel
                )
            got += n
        # The source is read once; its pages would only push the destination's out of the cache.
        _fadvise(fd, offset, len(view), "POSIX_FADV_DONTNEED")

    def done(self, f: SourceFile) -> None:
        fd = self.fds.pop(f.rel, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _fadvise(fd: int, offset: int, length: int, advice: str) -> None:
    if hasattr(os, "posix_fadvise"):
        # Advice only; some filesystems (FUSE) refuse it.
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, length, getattr(os, advice))


# ---- S3 ------------------------------------------------------------------------------------


def _uri_encode(text: str, safe: str) -> str:
    return urllib.parse.quote(text, safe=safe + "-_.~")


def sigv4_headers(
    method: str,
    host: str,
    path: str,
    query: Iterable[tuple[str, str]],
    headers: dict[str, str],
    region: str,
    access_key: str,
    secret_key: str,
    session_token: str = "",
    payload_sha256: str = EMPTY_SHA256,
    now: float | None = None,
    service: str = "s3",
) -> dict[str, str]:
    """The request headers with AWS Signature Version 4 added (Authorization, x-amz-date, ...).

    ``path`` is the already URI-encoded path as sent on the wire; ``query`` the decoded pairs.
    """
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    out = dict(headers)
    out["host"] = host
    out["x-amz-date"] = amz_date
    out["x-amz-content-sha256"] = payload_sha256
    if session_token:
        out["x-amz-security-token"] = session_token
    canon = {k.lower(): " ".join(str(v).split()) for k, v in out.items()}
    signed = ";".join(sorted(canon))
    canonical_query = "&".join(f"{_uri_encode(k, '')}={_uri_encode(v, '')}" for k, v in sorted(query))
    canonical_request = "\n".join(
        [method, path, canonical_query, "".join(f"{k}:{canon[k]}\n" for k in sorted(canon)), signed, payload_sha256]
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (amz_date[:8], region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return out


@dataclass(frozen=True)
class S3Config:
    endpoint: str  # http(s)://host[:port]
    bucket: str
    prefix: str  # ends with '/' unless empty
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = ""
    session_token: str = ""
    addressing: str = "auto"  # auto | path | virtual
    ca_file: str = ""
    timeout_s: float = 60.0


_RETRYABLE = (ConnectionError, http.client.HTTPException, socket.timeout, TimeoutError)


class S3Source(Source):
    """An S3-compatible bucket: AWS S3, MinIO, Ceph RGW, moto. Plain HTTP(S) with SigV4."""

    kind = "s3"
    # Several ranged GETs per file in flight: one HTTP stream rarely fills a node's link.
    default_streams = 4
    page_size = 1000  # ListObjectsV2 max-keys; S3's own maximum

    def __init__(self, cfg: S3Config) -> None:
        url = urllib.parse.urlsplit(cfg.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise WarmupError(
                "input", f"s3 endpoint '{cfg.endpoint}': expected http(s)://host[:port]; set --s3-endpoint or AWS_ENDPOINT_URL"
            )
        if not cfg.bucket:
            raise WarmupError("input", "s3 source: no bucket; write the source as s3://BUCKET/PREFIX/")
        if bool(cfg.access_key) != bool(cfg.secret_key):
            raise WarmupError("input", "s3 credentials: access key and secret key come together; set both or neither (anonymous)")
        self.cfg = cfg
        self.tls = url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        virtual = cfg.addressing == "virtual" or (cfg.addressing == "auto" and url.hostname.endswith(".amazonaws.com"))
        self.host = f"{cfg.bucket}.{url.hostname}" if virtual else url.hostname
        self.base = "" if virtual else "/" + _uri_encode(cfg.bucket, "")
        self.host_header = self.host if url.port is None else f"{self.host}:{url.port}"

    def describe(self) -> str:
        return f"s3://{self.cfg.bucket}/{self.cfg.prefix} at {self.cfg.endpoint}"

    def connect(self) -> http.client.HTTPConnection:
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.cfg.ca_file or None)
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.cfg.timeout_s, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.cfg.timeout_s)

    def signed(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str]) -> dict[str, str]:
        if not self.cfg.access_key:
            return {**headers, "host": self.host_header}
        return sigv4_headers(
            method,
            self.host_header,
            path,
            query,
            headers,
            self.cfg.region,
            self.cfg.access_key,
            self.cfg.secret_key,
            self.cfg.session_token,
        )

    def key_path(self, rel: str) -> str:
        return self.base + "/" + _uri_encode(self.cfg.prefix + rel, "/")

    def error(self, status: int, body: bytes, what: str, path: str = "") -> WarmupError:
        code = message = ""
        try:
            root = ET.fromstring(body)
            code = _xml_text(root, "Code")
            message = _xml_text(root, "Message")
        except ET.ParseError:
            pass
        hint = {
            "AccessDenied": "check the credentials' permissions (s3:ListBucket, s3:GetObject)",
            "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID or the vaulted access key",
            "SignatureDoesNotMatch": "check the secret key and --s3-region",
            "NoSuchBucket": f"bucket '{self.cfg.bucket}' does not exist at {self.cfg.endpoint}; check the source URI and endpoint",
            "NoSuchKey": "the object vanished after listing; is an upload in progress?",
            "PreconditionFailed": "the object changed while it was being copied; run again",
        }.get(code, "check the endpoint and credentials")
        detail = f"{code}: {message}" if code else f"HTTP {status}"
        return WarmupError("source", f"{what}: {detail}; {hint}", path)

    def list_files(self) -> list[SourceFile]:
        conn = self.connect()
        found: list[SourceFile] = []
        token = ""
        try:
            while True:
                query = [("list-type", "2"), ("max-keys", str(self.page_size)), ("prefix", self.cfg.prefix)]
                if token:
                    query.append(("continuation-token", token))
                path = self.base + "/"
                qs = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
                try:
                    conn.request("GET", f"{path}?{qs}", headers=self.signed("GET", path, query, {}))
                    resp = conn.getresponse()
                    body = resp.read()
                except (OSError, http.client.HTTPException) as exc:
                    raise WarmupError(
                        "source", f"cannot reach S3 endpoint {self.cfg.endpoint}: {exc}; check the endpoint and the network"
                    ) from None
                if resp.status != 200:
                    raise self.error(resp.status, body, f"listing {self.describe()}")
                root = ET.fromstring(body)
                for item in _xml_children(root, "Contents"):
                    key = _xml_text(item, "Key")
                    rel = key[len(self.cfg.prefix) :]
                    if not rel or rel.endswith("/") or any(_is_own_name(p) for p in rel.split("/")):
                        continue
                    found.append(SourceFile(rel, int(_xml_text(item, "Size")), _xml_text(item, "ETag").strip('"')))
                if _xml_text(root, "IsTruncated") != "true":
                    break
                token = _xml_text(root, "NextContinuationToken")
        finally:
            conn.close()
        return sorted(found, key=lambda f: f.rel)

    def reader(self) -> Reader:
        return _S3Reader(self)


class _S3Reader(Reader):
    ATTEMPTS = 4

    def __init__(self, source: S3Source) -> None:
        self.source = source
        self.conn: http.client.HTTPConnection | None = None

    def read_into(self, f: SourceFile, offset: int, view: memoryview) -> None:
        src = self.source
        path = src.key_path(f.rel)
        last = offset + len(view) - 1
        # If-Match pins the object version we listed: a concurrent re-upload fails the read
        # instead of splicing two versions into one file.
        headers = {"range": f"bytes={offset}-{last}", "if-match": f'"{f.identity}"'}
        for attempt in range(self.ATTEMPTS):
            if self.conn is None:
                self.conn = src.connect()
            try:
                self.conn.request("GET", path, headers=src.signed("GET", path, [], headers))
                resp = self.conn.getresponse()
                if resp.status not in (200, 206):
                    body = resp.read()
                    if resp.status >= 500 and attempt + 1 < self.ATTEMPTS:
                        time.sleep(0.5 * 2**attempt)
                        continue
                    raise src.error(resp.status, body, f"{f.rel}: GET {src.cfg.prefix}{f.rel}", f.rel)
                got = 0
                while got < len(view):
                    n = resp.readinto(view[got:])
                    if not n:
                        raise http.client.IncompleteRead(b"", len(view) - got)
                    got += n
                if resp.read(1):
                    raise WarmupError("source", f"{f.rel}: the store sent more than the requested range; it ignores Range headers", f.rel)
                return
            except _RETRYABLE as exc:
                self.close()
                if attempt + 1 == self.ATTEMPTS:
                    raise WarmupError(
                        "source", f"{f.rel}: reading bytes {offset}-{last} failed {self.ATTEMPTS} times: {exc!r}", f.rel
                    ) from None
                time.sleep(0.5 * 2**attempt)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _xml_children(node: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in node if c.tag.rsplit("}", 1)[-1] == name]


def _xml_text(node: ET.Element, name: str) -> str:
    for c in _xml_children(node, name):
        return c.text or ""
    return ""


def open_source(
    uri: str,
    s3_endpoint: str = "",
    s3_region: str = "",
    access_key: str = "",
    secret_key: str = "",
    session_token: str = "",
    addressing: str = "auto",
    ca_file: str = "",
    env: dict[str, str] | None = None,
) -> Source:
    """``s3://bucket/prefix/`` or a POSIX path (``/mnt/alluxio/...``, ``file:///...``).

    Unset S3 settings fall back to the AWS environment variables (AWS_ENDPOINT_URL_S3,
    AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, ...).
    """
    env = dict(os.environ) if env is None else env
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        prefix = prefix.strip("/")
        region = s3_region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or f"https://s3.{region}.amazonaws.com"
        if not access_key and not secret_key:
            access_key = env.get("AWS_ACCESS_KEY_ID", "")
            secret_key = env.get("AWS_SECRET_ACCESS_KEY", "")
            session_token = session_token or env.get("AWS_SESSION_TOKEN", "")
        cfg = S3Config(
            endpoint=endpoint.rstrip("/"),
            bucket=bucket,
            prefix=prefix + "/" if prefix else "",
            region=region,
            access_key=access_key,
            secret_key=secret_key,
            session_token=session_token,
            addressing=addressing,
            ca_file=ca_file,
        )
        return S3Source(cfg)
    if uri.startswith("file://"):
        uri = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    if not uri.startswith("/"):
        raise WarmupError("input", f"source '{uri}': expected s3://BUCKET/PREFIX/ or an absolute path (an NFS or Alluxio FUSE mount)")
    return PosixSource(uri)


# --------------------------------------------------------------------------------------------
# State: one verified record per file, in DEST
# --------------------------------------------------------------------------------------------


@dataclass
class Record:
    status: str  # verified: under its final name; staged: complete under its temp name, awaiting the model's verification
    size: int
    mtime_ns: int
    sha256: str
    source: str  # SourceFile.identity it was copied from

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "size": self.size, "mtime_ns": self.mtime_ns, "sha256": self.sha256, "source": self.source}


class State:
    def __init__(self, dest: str) -> None:
        self.path = os.path.join(dest, STATE_FILE)
        self.files: dict[str, Record] = {}
        self.meta: dict[str, Any] = {}
        self.reset_reason = ""
        self._written = ""
        self._lock = threading.Lock()

    def load(self) -> State:
        try:
            with open(self.path, encoding="utf-8") as fh:
                text = fh.read()
            data = json.loads(text)
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"state version {data.get('version')!r}")
            self.files = {rel: Record(**rec) for rel, rec in data["files"].items()}
            self.meta = {k: v for k, v in data.items() if k not in ("version", "files")}
            self._written = text
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            # An unreadable record only costs a re-copy; never trust it, never die on it.
            self.files, self.meta = {}, {}
            self.reset_reason = f"{STATE_FILE} unreadable ({exc}); every file is copied again"
        return self

    def text(self) -> str:
        data = {"version": STATE_VERSION, **self.meta, "files": {k: self.files[k].to_json() for k in sorted(self.files)}}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    def save(self) -> bool:
        """Write atomically if anything changed; True when written."""
        with self._lock:
            text = self.text()
            if text == self._written:
                return False
            tmp = self.path + TMP_SUFFIX
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(os.path.dirname(self.path))
            self._written = text
            return True

    def put(self, rel: str, rec: Record | None) -> None:
        with self._lock:
            if rec is None:
                self.files.pop(rel, None)
            else:
                self.files[rel] = rec


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _DestLock:
    def __init__(self, dest: str) -> None:
        self.path = os.path.join(dest, LOCK_FILE)
        self.fd = -1

    def __enter__(self) -> _DestLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise WarmupError(
                "busy", f"{os.path.dirname(self.path)}: another warm-up (pid {holder}) holds it; wait for it or stop it"
            ) from None
        # The pid lets an operator (or a test) find the run that holds DEST.
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# --------------------------------------------------------------------------------------------
# The copy pipeline
# --------------------------------------------------------------------------------------------


class Throttle:
    """Paces reads to a byte rate shared by every thread of the run."""

    def __init__(
        self, bytes_per_s: float, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.rate = bytes_per_s
        self.clock = clock
        self.sleep = sleep
        self.next = clock()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        """Block until n more bytes fit under the rate. Each caller reserves its slot under the
        lock and sleeps outside it, so concurrent readers queue up instead of bursting."""
        if self.rate <= 0:
            return
        with self.lock:
            now = self.clock()
            start = max(now, self.next)
            self.next = start + n / self.rate
        if start > now:
            self.sleep(start - now)


class _Cancelled(Exception):
    pass


class _FileCopy:
    """One file through the pipeline: S reader threads fill page-aligned buffers part by part;
    a writer thread writes parts in order; the calling thread hashes parts in order. A buffer
    returns to the pool when both have seen it, so hashing overlaps reading and writing and
    memory stays bounded at (S + 2) buffers."""

    def __init__(self, engine: Engine, f: SourceFile, tmp: str, buffers: list[mmap.mmap]) -> None:
        self.engine = engine
        self.f = f
        self.tmp = tmp
        self.chunk = len(buffers[0])
        self.parts = (f.size + self.chunk - 1) // self.chunk
        self.cond = threading.Condition()
        self.free = list(range(len(buffers)))  # indices of idle buffers
        self.ready: dict[int, int] = {}  # part -> buffer index
        self.pending: dict[int, int] = {}  # part -> consumers left (writer, hasher)
        self.next_part = 0
        self.error: BaseException | None = None
        self.buffers = buffers

    def _check(self) -> None:
        """Stop this thread when another thread of the file, or another file, has failed."""
        if self.error is not None or self.engine.cancel.is_set():
            raise _Cancelled()

    def _fetch_loop(self) -> None:
        reader = self.engine.reader()
        try:
            while True:
                with self.cond:
                    # Take a buffer before claiming a part: every claimed part can then always
                    # finish, so the in-order consumers never wait on a part that waits on them.
                    while not self.free and self.error is None and not self.engine.cancel.is_set():
                        self.cond.wait(0.5)
                    self._check()
                    if self.next_part >= self.parts:
                        return
                    part = self.next_part
                    self.next_part += 1
                    buf = self.free.pop()
                offset = part * self.chunk
                n = min(self.chunk, self.f.size - offset)
                self.engine.throttle.take(n)
                reader.read_into(self.f, offset, memoryview(self.buffers[buf])[:n])
                with self.cond:
                    self.ready[part] = buf
                    self.pending[part] = 2
                    self.cond.notify_all()
        except BaseException as exc:
            self._fail(exc)
        finally:
            reader.done(self.f)
            self.engine.release_reader(reader)

    def _fail(self, exc: BaseException) -> None:
        with self.cond:
            if self.error is None or isinstance(self.error, _Cancelled):
                self.error = exc
            self.cond.notify_all()

    def _wait_part(self, part: int) -> memoryview:
        with self.cond:
            while part not in self.ready:
                self._check()
                self.cond.wait(0.5)
            buf = self.ready[part]
        n = min(self.chunk, self.f.size - part * self.chunk)
        return memoryview(self.buffers[buf])[:n]

    def _release(self, part: int) -> None:
        with self.cond:
            self.pending[part] -= 1
            if self.pending[part] == 0:
                del self.pending[part]
                self.free.append(self.ready.pop(part))
                self.cond.notify_all()

    def _write_loop(self, fd: int) -> None:
        try:
            for part in range(self.parts):
                view = self._wait_part(part)
                offset = part * self.chunk
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], offset + done)
                self._release(part)
            # fdatasync carries the size too; the name is made durable after the rename.
            os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)
        except BaseException as exc:
            self._fail(exc)

    def run(self) -> str:
        """Copy, hash and fsync; returns the sha256 of every byte written."""
        digest = hashlib.sha256()
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        threads: list[threading.Thread] = []
        try:
            if self.f.size:
                try:
                    # Claims the blocks up front: ENOSPC now rather than halfway, and less fragmentation.
                    os.posix_fallocate(fd, 0, self.f.size)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        raise WarmupError(
                            "space", f"{self.f.rel}: no space left for {self.f.size} bytes in {os.path.dirname(self.tmp)}", self.f.rel
                        ) from None
                    # EOPNOTSUPP/EINVAL: filesystems without fallocate just grow the file.
            streams = max(1, min(self.engine.streams, self.parts))
            threads = [threading.Thread(target=self._fetch_loop, daemon=True) for _ in range(streams)]
            threads.append(threading.Thread(target=self._write_loop, args=(fd,), daemon=True))
            for t in threads:
                t.start()
            try:
                for part in range(self.parts):
                    view = self._wait_part(part)
                    digest.update(view)
                    self._release(part)
                    self.engine.progress(self.f.rel, len(view))
            except BaseException as exc:
                self._fail(exc)
            for t in threads:
                t.join()
            if self.error is not None:
                raise self.error
            if not self.parts:
                os.fsync(fd)
        finally:
            os.close(fd)
        return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    changed: bool = False
    model: str = ""
    release: str = ""
    source: str = ""
    dest: str = ""
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)  # complete temp files of an interrupted run
    unpinned: list[str] = field(default_factory=list)  # copied intact, but the release pins no hash for them
    listing: bool = False  # the source published weights.sha256: every shard was checked on its own
    files: int = 0
    bytes_total: int = 0
    bytes_copied: int = 0
    seconds: float = 0.0
    gb_per_s: float = 0.0
    preread_bytes: int = 0
    preread_seconds: float = 0.0
    weights_manifest_sha256: str = ""
    state_file: str = ""
    notes: list[str] = field(default_factory=list)
    would_copy: list[str] = field(default_factory=list)  # check mode
    last_copy: dict[str, Any] = field(default_factory=dict)  # the last run that copied anything: files, bytes, seconds, GB/s
    bytes_needed: int = 0
    bytes_free: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Engine:
    def __init__(
        self, source: Source, dest: str, expected: Expected, model: str = "", release: str = "", options: Options | None = None
    ) -> None:
        self.source = source
        self.dest = os.path.abspath(dest)
        self.expected = expected
        self.model = model
        self.release = release
        self.opt = options or Options()
        if self.opt.workers < 1 or self.opt.streams < 0 or self.opt.chunk_bytes < 64 * 1024:
            raise WarmupError("input", "workers >= 1, streams >= 0 and chunk >= 64 KiB are required")
        # Page-aligned, a multiple of the page size: what O_DIRECT-capable and FUSE paths want.
        self.chunk = (self.opt.chunk_bytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self.streams = self.opt.streams or source.default_streams
        self.throttle = Throttle(self.opt.max_bytes_per_s)
        self.cancel = threading.Event()
        self.state = State(self.dest)
        self._readers: list[Reader] = []
        self._readers_lock = threading.Lock()
        self._progress_lock = threading.Lock()
        self._buffers = threading.local()

    # -- small helpers ------------------------------------------------------------------------

    def final_path(self, rel: str) -> str:
        return os.path.join(self.dest, *rel.split("/"))

    def tmp_path(self, rel: str) -> str:
        head, _, name = rel.rpartition("/")
        return os.path.join(self.dest, *([*head.split("/")] if head else []), f".{name}{TMP_SUFFIX}")

    def reader(self) -> Reader:
        with self._readers_lock:
            if self._readers:
                return self._readers.pop()
        return self.source.reader()

    def release_reader(self, reader: Reader) -> None:
        # Keep-alive: S3 connections are reused by the next file.
        with self._readers_lock:
            self._readers.append(reader)

    def progress(self, rel: str, n: int) -> None:
        if self.opt.on_progress is not None:
            with self._progress_lock:
                self.opt.on_progress(rel, n)

    def expected_for(self, rel: str, listing: dict[str, str] | None) -> tuple[str | None, str]:
        """(expected sha256 or None, where that expectation comes from)."""
        if rel in PINNED_FIELDS:
            name = PINNED_FIELDS[rel]
            return getattr(self.expected, name), f"the release's {name}"
        if rel == LISTING_FILE:
            return self.expected.weights_manifest_sha256, "the release's weights_manifest_sha256"
        if rel.endswith(WEIGHT_SUFFIX) and listing is not None:
            return listing.get(rel), f"{LISTING_FILE}, which matches the release's weights_manifest_sha256"
        return None, ""

    # -- steps ----------------------------------------------------------------------------------

    def run(self) -> Result:
        self.expected.check()
        t0 = time.monotonic()
        res = Result(model=self.model, release=self.release, source=self.source.describe(), dest=self.dest)
        res.state_file = self.state.path
        if self.opt.check_only:
            return self._plan_only(res)
        try:
            os.makedirs(self.dest, exist_ok=True)
        except OSError as exc:
            raise WarmupError("io", f"dest {self.dest}: cannot create it ({exc.strerror}); check the path and permissions") from None
        with _DestLock(self.dest):
            files, listing, todo = self._prepare(res)
            if todo:
                # DEST no longer holds a verified model until this run finishes.
                self.state.meta.pop("verified", None)
                self.state.save()
            self._remove_orphan_temps(files)
            if self.opt.on_plan is not None:
                self.opt.on_plan({f.rel: f.size for f in todo})
            t_copy = time.monotonic()
            self._copy_all(todo, listing, res)
            res.seconds = round(time.monotonic() - t_copy, 3)
            res.bytes_copied = sum(f.size for f in todo)
            res.gb_per_s = round(res.bytes_copied / res.seconds / 1e9, 3) if res.seconds > 0 else 0.0
            res.weights_manifest_sha256 = self._verify_model(files, listing, res)
            res.changed = bool(res.copied or res.reused)
            if res.changed:
                self.state.meta["last_copy"] = {
                    "files": len(res.copied),
                    "bytes": res.bytes_copied,
                    "seconds": res.seconds,
                    "gb_per_s": res.gb_per_s,
                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            self.state.meta.update(
                model=self.model,
                release=self.release,
                source=self.source.describe(),
                verified={
                    "config_sha256": self.expected.config_sha256,
                    "tokenizer_sha256": self.expected.tokenizer_sha256,
                    "weights_manifest_sha256": res.weights_manifest_sha256,
                },
            )
            # Unchanged content is not rewritten: a run that copied nothing touches nothing.
            self.state.save()
            res.last_copy = dict(self.state.meta.get("last_copy", {}))
            if self.opt.preread:
                res.preread_bytes, res.preread_seconds = self._preread(files)
        if not res.changed:
            res.seconds = round(time.monotonic() - t0, 3)
        return res

    def _prepare(self, res: Result) -> tuple[list[SourceFile], dict[str, str] | None, list[SourceFile]]:
        """Every check that can fail before the first byte is written; returns what to copy."""
        self.state.load()
        if self.state.reset_reason:
            res.notes.append(self.state.reset_reason)
        files = self._list_source()
        listing = self._load_listing(files)
        res.listing = listing is not None
        self._check_shape(files, listing)
        if os.path.isdir(self.dest):
            self._check_dest_strays(files)
        todo = self._plan(files, listing, res)
        res.files, res.bytes_total = len(files), sum(f.size for f in files)
        res.bytes_needed, res.bytes_free = self._check_space(todo)
        res.unpinned = sorted(f.rel for f in files if self.expected_for(f.rel, listing)[0] is None and not f.rel.endswith(WEIGHT_SUFFIX))
        return files, listing, todo

    def _plan_only(self, res: Result) -> Result:
        """Check mode: the same checks and plan, nothing written (not even the lock file)."""
        files, _, todo = self._prepare(res)
        res.would_copy = [f.rel for f in todo]
        staged = [f.rel for f in files if f.rel in self.state.files and self.state.files[f.rel].status == "staged"]
        res.changed = bool(todo or staged)
        res.last_copy = dict(self.state.meta.get("last_copy", {}))
        if not res.changed:
            res.weights_manifest_sha256 = self.state.meta.get("verified", {}).get("weights_manifest_sha256", "")
        return res

    def _list_source(self) -> list[SourceFile]:
        files = [f for f in self.source.list_files() if not any(fnmatch.fnmatchcase(f.rel, p) for p in self.opt.exclude)]
        if not files:
            raise WarmupError(
                "source", f"source {self.source.describe()}: no files; check the URI (prefix, trailing path) and the excludes"
            )
        return files

    def _load_listing(self, files: list[SourceFile]) -> dict[str, str] | None:
        entry = next((f for f in files if f.rel == LISTING_FILE), None)
        if entry is None:
            return None
        text = self.source.read_small(entry)
        got = hashlib.sha256(text).hexdigest()
        if got != self.expected.weights_manifest_sha256:
            raise WarmupError(
                "verify",
                f"{LISTING_FILE}: sha256 {got} is not the release's weights_manifest_sha256 {self.expected.weights_manifest_sha256}; "
                f"the source holds another revision than the release pins, or the listing is stale: republish it or fix the release",
                LISTING_FILE,
            )
        listing: dict[str, str] = {}
        for n, line in enumerate(text.decode("utf-8", errors="replace").splitlines(), 1):
            digest, sep, path = line.partition("  ")
            if not sep or len(digest) != 64 or not path.startswith("./"):
                raise WarmupError("source", f"{LISTING_FILE} line {n}: expected '<sha256>  ./<path>' (sha256sum output)", LISTING_FILE)
            listing[path[2:]] = digest
        return listing

    def _check_shape(self, files: list[SourceFile], listing: dict[str, str] | None) -> None:
        names = {f.rel for f in files}
        missing = [n for n in ("config.json", "tokenizer.json") if n not in names]
        shards = sorted(n for n in names if n.endswith(WEIGHT_SUFFIX))
        if missing:
            raise WarmupError(
                "source", f"source {self.source.describe()}: {', '.join(missing)} missing; is this a model directory?", missing[0]
            )
        if not shards:
            raise WarmupError("source", f"source {self.source.describe()}: no *{WEIGHT_SUFFIX} files; is this a model directory?")
        if listing is not None:
            absent = sorted(set(listing) - set(shards))
            extra = sorted(set(shards) - set(listing))
            if absent:
                raise WarmupError(
                    "source",
                    f"{absent[0]}: listed in {LISTING_FILE} but absent from the source ({len(absent)} such); finish the upload",
                    absent[0],
                )
            if extra:
                raise WarmupError(
                    "verify",
                    f"{extra[0]}: in the source but not in {LISTING_FILE} ({len(extra)} such); it is not part of the release",
                    extra[0],
                )

    def _check_dest_strays(self, files: list[SourceFile]) -> None:
        """A shard in DEST that the source lacks would be loaded with the model: refuse, never delete."""
        wanted = {f.rel for f in files}
        for top, dirs, names in os.walk(self.dest):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                if not name.endswith(WEIGHT_SUFFIX):
                    continue
                rel = os.path.relpath(os.path.join(top, name), self.dest).replace(os.sep, "/")
                if rel not in wanted:
                    raise WarmupError(
                        "input",
                        f"{rel}: in {self.dest} but not in the source; the engine would load it with this model: "
                        f"remove it or warm into an empty directory",
                        rel,
                    )

    def _plan(self, files: list[SourceFile], listing: dict[str, str] | None, res: Result) -> list[SourceFile]:
        todo = []
        for f in files:
            rec = self.state.files.get(f.rel)
            expected, _ = self.expected_for(f.rel, listing)
            if rec is not None and rec.source == f.identity and rec.size == f.size and (expected is None or rec.sha256 == expected):
                path = self.final_path(f.rel) if rec.status == "verified" else self.tmp_path(f.rel)
                try:
                    st: os.stat_result | None = os.stat(path)
                except FileNotFoundError:
                    st = None
                intact = st is not None and st.st_size == rec.size and st.st_mtime_ns == rec.mtime_ns
                if intact and (not self.opt.recheck or _sha256_path(path, self.chunk) == rec.sha256):
                    if rec.status == "verified":
                        res.skipped.append(f.rel)
                    continue
            todo.append(f)
        return todo

    def _check_space(self, todo: list[SourceFile]) -> tuple[int, int]:
        need = sum(f.size for f in todo) + self.opt.reserve_bytes
        st = os.statvfs(_nearest_existing(self.dest))
        free = st.f_bavail * st.f_frsize
        if todo and need > free:
            reserve = f" + {_human(self.opt.reserve_bytes)} reserve" if self.opt.reserve_bytes else ""
            raise WarmupError(
                "space",
                f"{self.dest}: needs {_human(need)} ({len(todo)} files to copy{reserve}), only {_human(free)} free; "
                f"nothing was copied: free space or warm into a larger filesystem",
            )
        return need, free

    def _remove_orphan_temps(self, files: list[SourceFile]) -> None:
        """Temp files without a staged record are leftovers of a killed run: never complete."""
        keep = {self.tmp_path(f.rel) for f in files if f.rel in self.state.files and self.state.files[f.rel].status == "staged"}
        for top, dirs, names in os.walk(self.dest):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                path = os.path.join(top, name)
                if name.endswith(TMP_SUFFIX) and path not in keep:
                    os.unlink(path)

    def _buffers_for_thread(self) -> list[mmap.mmap]:
        bufs = getattr(self._buffers, "pool", None)
        if bufs is None:
            # Allocated once per worker and reused for every file it copies: fresh anonymous
            # memory costs a page fault per 4 KiB on first touch.
            bufs = [mmap.mmap(-1, self.chunk) for _ in range(self.streams + 2)]
            self._buffers.pool = bufs
        return bufs

    def _copy_one(self, f: SourceFile, listing: dict[str, str] | None, res: Result) -> None:
        if self.cancel.is_set():
            return
        t0 = time.monotonic()
        final, tmp = self.final_path(f.rel), self.tmp_path(f.rel)
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        # Whatever sits under the final name has no valid record: it is not the file the release
        # pins, so it goes now rather than surviving a failed copy under a trusted name.
        self.state.put(f.rel, None)
        _unlink(final)
        try:
            digest = _FileCopy(self, f, tmp, self._buffers_for_thread()).run()
        except BaseException:
            _unlink(tmp)
            raise
        expected, origin = self.expected_for(f.rel, listing)
        st = os.stat(tmp)
        if expected is not None and digest != expected:
            _unlink(tmp)
            raise WarmupError(
                "verify",
                f"{f.rel}: sha256 {digest} does not match {expected} from {origin}; the source copy is corrupt or not the pinned "
                f"revision: re-upload it; nothing was placed under its final name",
                f.rel,
            )
        if expected is not None:
            os.replace(tmp, final)
            _fsync_dir(os.path.dirname(final))
            self.state.put(f.rel, Record("verified", st.st_size, st.st_mtime_ns, digest, f.identity))
        else:
            self.state.put(f.rel, Record("staged", st.st_size, st.st_mtime_ns, digest, f.identity))
        self.state.save()
        with self._progress_lock:
            res.copied.append(f.rel)
        if self.opt.on_file is not None:
            with self._progress_lock:
                self.opt.on_file(f.rel, "verified" if expected is not None else "staged", f.size, time.monotonic() - t0)

    def _copy_all(self, todo: list[SourceFile], listing: dict[str, str] | None, res: Result) -> None:
        if not todo:
            return
        # Largest first: the long poles start early and the tail is short files.
        order = sorted(todo, key=lambda f: -f.size)
        errors: list[BaseException] = []
        with ThreadPoolExecutor(max_workers=min(self.opt.workers, len(order)), thread_name_prefix="warmup") as pool:
            futures = [pool.submit(self._copy_one, f, listing, res) for f in order]
            try:
                for fut in futures:
                    exc = fut.exception()
                    if exc is not None and not isinstance(exc, _Cancelled):
                        errors.append(exc)
                        self.cancel.set()
            except BaseException:
                self.cancel.set()
                raise
            finally:
                for r in self._readers:
                    r.close()
        if errors:
            first = errors[0]
            if isinstance(first, WarmupError):
                raise first
            if isinstance(first, OSError):
                where = first.filename or self.dest
                raise WarmupError("io", f"{where}: {first.strerror or first}; check the disk and permissions") from None
            raise first

    def _verify_model(self, files: list[SourceFile], listing: dict[str, str] | None, res: Result) -> str:
        shards = {"./" + f.rel: self.state.files[f.rel].sha256 for f in files if f.rel.endswith(WEIGHT_SUFFIX)}
        got = manifest_sha256(shards)
        if got != self.expected.weights_manifest_sha256:
            # Only shards no hash of their own could vouch for are still staged: drop them.
            for f in files:
                rec = self.state.files.get(f.rel)
                if rec is not None and rec.status == "staged" and f.rel.endswith(WEIGHT_SUFFIX):
                    _unlink(self.tmp_path(f.rel))
                    self.state.put(f.rel, None)
            self.state.save()
            raise WarmupError(
                "verify",
                f"weights manifest: the {len(shards)} *{WEIGHT_SUFFIX} files hash to {got}, the release pins "
                f"{self.expected.weights_manifest_sha256}; the source publishes no {LISTING_FILE} that would name the bad shard: "
                f"compare `inferplane manifest hash-model --listing` of the source with the publisher's listing; "
                f"no shard was placed under its final name",
            )
        for f in files:
            rec = self.state.files[f.rel]
            if rec.status != "staged":
                continue
            final = self.final_path(f.rel)
            os.replace(self.tmp_path(f.rel), final)
            _fsync_dir(os.path.dirname(final))
            self.state.put(f.rel, Record("verified", rec.size, rec.mtime_ns, rec.sha256, rec.source))
            if f.rel not in res.copied:
                res.reused.append(f.rel)
        return got

    def _preread(self, files: list[SourceFile]) -> tuple[int, float]:
        """Read every final file once so the engine's load hits memory (the page cache)."""
        t0 = time.monotonic()
        paths = [self.final_path(f.rel) for f in sorted(files, key=lambda f: -f.size)]
        for p in paths:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
            _fadvise(fd, 0, 0, "POSIX_FADV_WILLNEED")
            os.close(fd)

        def read_through(path: str) -> int:
            buf = bytearray(self.chunk)
            total = 0
            with open(path, "rb", buffering=0) as fh:
                while True:
                    n = fh.readinto(buf)
                    if not n:
                        return total
                    total += n

        with ThreadPoolExecutor(max_workers=self.opt.workers) as pool:
            total = sum(pool.map(read_through, paths))
        return total, round(time.monotonic() - t0, 3)


def _nearest_existing(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _sha256_path(path: str, chunk: int) -> str:
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                return digest.hexdigest()
            digest.update(view[:n])


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def warm_up(source: Source, dest: str, expected: Expected, model: str = "", release: str = "", options: Options | None = None) -> Result:
    """Copy and verify one model into DEST. Raises WarmupError (with the file named) on failure."""
    return Engine(source, dest, expected, model, release, options).run()
