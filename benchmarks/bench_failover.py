"""Mooncake master failover: time to a new leader and to the first good write after SIGKILL of the
leader, over repeated drills, against the physical lower bound (master_view lease TTL 5 s + one TTL
of leader warm-up); keys lost with and without --enable_oplog, side by side.

Real etcd and real mooncake_master pairs started here on free ports (the no-oplog pair cannot come
from the local platform, which always runs with oplog); the drill itself is the playbook's code:
inferplane.node.mooncake_drill's recorder with a real store client, and mooncake_ha's timeline math.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from inferplane.node import mooncake_ha as ha
from inferplane.node.mooncake_drill import Recorder, wait_for_recovery
from inferplane.node.mooncake_store_client import client_config

SEED_KEYS = 50


def _binary(name: str) -> str:
    venv = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).resolve().parents[1] / ".venv")) / "bin" / name
    found = shutil.which(name) or (str(venv) if venv.exists() else None)
    if not found:
        raise SystemExit(f"{name} not found: run `make deps venv` first")
    return found


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Pair:
    """One etcd member and two masters in HA: enough for the lease arithmetic being measured."""

    def __init__(self, root: Path, *, oplog: bool) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.oplog = oplog
        self.cluster_id = f"bench_{'oplog' if oplog else 'nooplog'}_{os.getpid()}"
        client, peer, *rest = _free_ports(6)
        self.etcd = f"127.0.0.1:{client}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.masters = [
            {"name": f"m{i}", "rpc_address": f"127.0.0.1:{rest[2 * i]}", "metrics_url": f"http://127.0.0.1:{rest[2 * i + 1]}/metrics"}
            for i in range(2)
        ]
        self._spawn(
            "etcd",
            [
                _binary("etcd"),
                "--name=bench",
                f"--data-dir={root / 'etcd'}",
                f"--listen-client-urls=http://{self.etcd}",
                f"--advertise-client-urls=http://{self.etcd}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=bench=http://127.0.0.1:{peer}",
            ],
        )
        self._wait(lambda: ha.etcd_health(self.etcd), "etcd")
        for m in self.masters:
            self.start(m["name"])
        self.wait_healthy()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def start(self, name: str) -> None:
        m = next(m for m in self.masters if m["name"] == name)
        rpc = m["rpc_address"].rsplit(":", 1)[1]
        metrics = m["metrics_url"].rsplit(":", 1)[1].split("/")[0]
        self._spawn(
            name,
            [
                _binary("mooncake_master"),
                "--enable_ha=true",
                f"--etcd_endpoints={self.etcd}",
                f"--enable_oplog={'true' if self.oplog else 'false'}",
                f"--cluster_id={self.cluster_id}",
                "--rpc_address=127.0.0.1",
                f"--rpc_port={rpc}",
                "--metrics_host=127.0.0.1",
                f"--metrics_port={metrics}",
            ],
        )

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def diagnosis(self) -> dict[str, Any]:
        return ha.assess(ha.snapshot([self.etcd], self.masters, self.cluster_id, with_segments=False), expected_etcd_members=1)

    def wait_healthy(self, timeout: float = 60) -> dict[str, Any]:
        return self._wait(lambda: (d := self.diagnosis())["verdict"] == "healthy" and d, "a healthy pair", timeout)

    @staticmethod
    def _wait(pred: Any, what: str, timeout: float = 60) -> Any:
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = pred()
            if got:
                return got
            time.sleep(0.25)
        raise RuntimeError(f"timed out waiting for {what}")

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def leader_kill(pair: Pair, run_dir: Path) -> dict[str, Any]:
    leader = pair.wait_healthy()["leader"]
    cfg = client_config(
        master_address=f"etcd://{pair.etcd}", cluster_id=pair.cluster_id, key_prefix=f"bench/{run_dir.name}", seed_keys=SEED_KEYS
    )
    rec = Recorder(
        run_dir=str(run_dir),
        masters=pair.masters,
        etcd_endpoints=[pair.etcd],
        cluster_id=pair.cluster_id,
        client_cfg=cfg,
        client_python=_python(),
    )
    rec.start(60)
    stop = threading.Event()
    watcher = threading.Thread(target=rec.watch, args=(None, 180, stop), daemon=True)
    watcher.start()
    time.sleep(1.0)
    fault_at = time.time()
    pair.kill(leader)
    done, progress = wait_for_recovery(
        rec.timeline_path, drill="leader_kill", fault_at=fault_at, previous_leader=leader, previous_etcd_leader=None, hold_s=0, timeout_s=60
    )
    pair.start(leader)
    try:
        pair.wait_healthy()
    finally:
        stop.set()
        watcher.join()
        summary = rec.finish(60)
    return {"recovered": done, **progress, **{k: summary[k] for k in ("seed_keys_written", "seed_keys_lost", "verify_completed")}}


def _python() -> str:
    venv = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else os.environ.get("PYTHON", "python3")


def _row(setup: str, drills: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [d for d in drills if d["recovered"]]
    leader = [d["new_leader_s"] for d in ok]
    writes = [d["writes_recovered_s"] for d in ok]
    written = sum(d["seed_keys_written"] for d in drills)
    lost = sum(d["seed_keys_lost"] for d in drills)
    bound = ha.LOWER_BOUND_FAILOVER_S
    return {
        "setup": setup,
        "drills": f"{len(ok)}/{len(drills)} recovered",
        "new leader p50 s": round(ha.percentile(leader, 50), 2) if leader else "-",
        "new leader max s": round(max(leader), 2) if leader else "-",
        "writes OK p50 s": round(ha.percentile(writes, 50), 2) if writes else "-",
        "writes OK max s": round(max(writes), 2) if writes else "-",
        "bound s (TTL+warm-up)": bound,
        "p50 / bound": round(ha.percentile(writes, 50) / bound, 2) if writes else "-",
        "keys lost": f"{lost}/{written}",
    }


def run(quick: bool) -> dict[str, Any]:
    n_oplog, n_plain = (3, 1) if quick else (10, 2)
    root = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    rows = []
    try:
        for oplog, n in ((True, n_oplog), (False, n_plain)):
            pair = Pair(root / ("oplog" if oplog else "nooplog"), oplog=oplog)
            try:
                drills = [leader_kill(pair, root / f"{'oplog' if oplog else 'nooplog'}-{i}") for i in range(n)]
            finally:
                pair.close()
            rows.append(_row("HA + oplog" if oplog else "HA, no oplog", drills))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "title": "Mooncake leader kill: failover time and keys lost",
        "rows": rows,
        "notes": (
            "SIGKILL of the serving leader while a real store client writes a key every 0.1 s. 'new leader' = first sample "
            "(every 0.2 s) in which the standby serves; 'writes OK' = end of the first successful put after the first failed "
            f"one. Bound = master_view lease TTL ({ha.MASTER_VIEW_LEASE_TTL_S} s) + one TTL of leader warm-up. Keys lost = "
            f"{SEED_KEYS} seed keys per drill written before the fault and read back after it by the same client."
        ),
    }
