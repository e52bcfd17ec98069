"""A real Mooncake store client in a child process: seed keys, a write stream, read-back.

The store client (``mooncake.store.MooncakeDistributedStore``) is a C++ extension: ``setup`` and
``close`` hold the GIL, a put blocks for seconds while the leader is gone, and ``close`` can hang
after a failover. So it never runs in the caller's process: the caller (an Ansible module, the
benchmark) starts this file's ``child_main`` in a subprocess, reads one JSON line per operation,
and kills the child when it stops talking. A hung client then costs a timeout, never a hung run.

The data of a key lives in the segment of the client that wrote it: if that client exits, its
segment is unmounted and its keys go with it. The seed keys are therefore written and read back
by the same long-lived child, across the whole drill.

Stdlib only on the caller's side; the child needs the ``mooncake`` wheel in its interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

PROTOCOL_VERSION = 1


def value_for(key: str, size: int) -> bytes:
    """Deterministic value of a key, so a read-back needs no copy of what was written."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _emit(out: IO[str], **event: Any) -> None:
    event.setdefault("t", time.time())
    out.write(json.dumps(event) + "\n")
    out.flush()


def child_main(cfg: dict[str, Any]) -> None:
    """Runs in the child: setup, seed keys, stream puts until 'stop' on stdin, read everything back."""
    out = sys.stdout
    os.environ["MC_STORE_CLUSTER_ID"] = cfg["cluster_id"]  # must equal the masters' --cluster_id
    try:
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    except ImportError as exc:
        _emit(out, kind="setup", rc=-1, error=f"mooncake.store not importable in {sys.executable}: {exc}")
        os._exit(3)
    store = MooncakeDistributedStore()
    t0 = time.time()
    rc = store.setup(
        cfg["local_hostname"],
        cfg["metadata_server"],
        int(cfg["global_segment_size"]),
        int(cfg["local_buffer_size"]),
        cfg["protocol"],
        cfg.get("device_name", ""),
        cfg["master_address"],
    )
    _emit(out, kind="setup", rc=int(rc), t=t0, t1=time.time())
    if rc != 0:
        os._exit(3)
    # Keep the drill's keys in this client's own segment: the master would otherwise also place
    # them on segments of clients that died less than client_ttl ago (put fails TRANSFER_FAIL).
    placement = ReplicateConfig()
    placement.replica_num = 1
    placement.preferred_segment = store.get_hostname()
    size = int(cfg["value_size"])
    prefix = cfg["key_prefix"]
    seeds = [f"{prefix}/seed/{i}" for i in range(int(cfg["seed_keys"]))]
    for key in seeds:
        t = time.time()
        rc = store.put(key, value_for(key, size), placement)
        _emit(out, kind="seed", key=key, rc=int(rc), t=t, t1=time.time())
    _emit(out, kind="ready", seeds=len(seeds))
    written: list[str] = []
    i = 0
    interval = float(cfg["interval_s"])
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], interval)
        if readable:
            line = sys.stdin.readline()
            if not line or line.strip() == "stop":
                break
        if not cfg.get("stream", True):
            continue
        key = f"{prefix}/stream/{i}"
        t = time.time()
        rc = store.put(key, value_for(key, size), placement)
        _emit(out, kind="put", key=key, rc=int(rc), t=t, t1=time.time())
        if rc == 0:
            written.append(key)
        i += 1
    for key in seeds + written[-int(cfg.get("verify_stream_max", 200)) :]:
        t = time.time()
        got = store.get(key)
        _emit(out, kind="verify", key=key, ok=bytes(got) == value_for(key, size), size=len(got), t=t, t1=time.time())
    _emit(out, kind="done")
    # close() unmounts the segment so the master stops placing data on it at once; it can block
    # for a long time after a failover and holds the GIL meanwhile, so SIGALRM's default action
    # (terminate) bounds it.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(cfg.get("close_timeout_s", 5)))
    store.close()
    os._exit(0)


def _import_root() -> tuple[str, str]:
    """(sys.path entry, module name) under which a fresh interpreter finds this very file.

    As ``inferplane.node.mooncake_store_client`` (benchmark) or as
    ``ansible.module_utils.mooncake_store_client`` inside an Ansible module's payload zip.
    """
    name = __name__
    root = os.path.abspath(__file__)
    for _ in name.split("."):
        root = os.path.dirname(root)
    return root, name


def child_argv(python: str) -> list[str]:
    root, name = _import_root()
    boot = f"import sys, json; sys.path.insert(0, {root!r}); from {name} import child_main; child_main(json.loads(sys.argv[1]))"
    return [python, "-c", boot]


def client_config(
    *,
    master_address: str,
    cluster_id: str,
    key_prefix: str,
    seed_keys: int = 50,
    interval_s: float = 0.1,
    value_size: int = 4096,
    stream: bool = True,
    local_hostname: str = "127.0.0.1",
    metadata_server: str = "P2PHANDSHAKE",
    protocol: str = "tcp",
    device_name: str = "",
    global_segment_size: int = 64 << 20,
    local_buffer_size: int = 16 << 20,
    verify_stream_max: int = 200,
) -> dict[str, Any]:
    if not master_address:
        raise ValueError("master_address is empty: pass the masters' etcd:// address (or host:rpc_port)")
    return {
        "version": PROTOCOL_VERSION,
        "master_address": master_address,
        "cluster_id": cluster_id,
        "key_prefix": key_prefix,
        "seed_keys": seed_keys,
        "interval_s": interval_s,
        "value_size": value_size,
        "stream": stream,
        "local_hostname": local_hostname,
        "metadata_server": metadata_server,
        "protocol": protocol,
        "device_name": device_name,
        "global_segment_size": global_segment_size,
        "local_buffer_size": local_buffer_size,
        "verify_stream_max": verify_stream_max,
    }


class StoreClientProcess:
    """Parent side: start the child, collect its events, stop it, kill it if it hangs."""

    def __init__(
        self, cfg: dict[str, Any], *, python: str, log_path: str, on_event: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.cfg = cfg
        self.python = python
        self.log_path = log_path
        self.on_event = on_event
        self.events: list[dict[str, Any]] = []
        self.last_line_at = 0.0
        self.killed_for_hang = False
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        env = dict(os.environ, MC_STORE_CLUSTER_ID=self.cfg["cluster_id"])
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed in _read's finally
        self._proc = subprocess.Popen(
            [*child_argv(self.python), json.dumps(self.cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,  # a signal meant for Ansible's process group does not reach the client
        )
        log.close()
        self.last_line_at = time.time()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)
                self.last_line_at = time.time()
            if self.on_event:
                self.on_event(event)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("kind") == kind]

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def silent_for(self) -> float:
        with self._lock:
            return time.time() - self.last_line_at

    def wait_for(self, kind: str, timeout: float) -> dict[str, Any] | None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.of_kind(kind)
            if found:
                return found[-1]
            if not self.alive() and self._reader is not None and not self._reader.is_alive():
                return None
            time.sleep(0.05)
        return None

    def stop(self, timeout: float) -> bool:
        """Ask for the read-back and wait for it; False if the child had to be killed."""
        if self._proc is None:
            return False
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write("stop\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        done = self.wait_for("done", timeout) is not None
        self.kill()
        return done

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the client saw: setup, seeds written, puts attempted/failed, keys read back intact."""
    setup = next((e for e in events if e.get("kind") == "setup"), None)
    seeds = [e for e in events if e.get("kind") == "seed"]
    puts = [e for e in events if e.get("kind") == "put"]
    verify = {e["key"]: e for e in events if e.get("kind") == "verify"}
    seed_ok = [e["key"] for e in seeds if e["rc"] == 0]
    put_ok = [e["key"] for e in puts if e["rc"] == 0]
    verified = bool(verify)
    lost_seeds = [k for k in seed_ok if verified and not verify.get(k, {}).get("ok")]
    checked_stream = [k for k in put_ok if k in verify]
    lost_stream = [k for k in checked_stream if not verify[k]["ok"]]
    return {
        "setup_rc": setup.get("rc") if setup else None,
        "setup_error": setup.get("error") if setup else "the client never reported its setup",
        "seed_keys_written": len(seed_ok),
        "seed_write_failures": len(seeds) - len(seed_ok),
        "puts": len(puts),
        "put_failures": len(puts) - len(put_ok),
        "verified": verified,
        "seed_keys_lost": len(lost_seeds),
        "lost_seed_keys": lost_seeds[:20],
        "stream_keys_checked": len(checked_stream),
        "stream_keys_lost": len(lost_stream),
        "lost_stream_keys": lost_stream[:20],
        "seed_keys": seed_ok,
    }
