"""One rollout per pool at a time: a lease in a file (the local backend's stand-in for a
``coordination.k8s.io`` Lease, with the same fields and the same rule).

The holder renews the lease as it goes; a lease is stale once ``renewed_at + ttl_s`` has passed,
or at once when its holder ran on this host and that process is gone (a crashed or killed run).
A stale lease may be taken over, and the takeover is reported. A live one is never broken
silently: the refusal names the holder so an operator can decide.

Stdlib only: Ansible ships it as ``ansible.module_utils.upgrade_lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class LockHeld(Exception):
    def __init__(self, holder: Holder) -> None:
        self.holder = holder
        super().__init__(holder.describe())


class LockLost(Exception):
    pass


@dataclass
class Holder:
    pool: str
    owner: str
    run_id: str
    host: str
    pid: int
    pid_starttime: int | None
    acquired_at: float
    renewed_at: float
    ttl_s: float

    def describe(self) -> str:
        return (
            f"pool {self.pool} is being changed by {self.owner} (run {self.run_id}, pid {self.pid} on {self.host}), "
            f"since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.acquired_at))}, "
            f"lease renewed {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.renewed_at))} for {self.ttl_s:.0f}s"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def starttime(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rfind(")") + 2 :].split()[19])


def alive(pid: int, start: int | None) -> bool:
    current = starttime(pid)
    return current is not None and (start is None or current == start)


def controller_pid(pid: int | None = None) -> int:
    """The ansible-playbook process a module runs under: the topmost ancestor whose command line
    names ansible-playbook (its task workers are forks of it and exit after each task)."""
    pid = os.getpid() if pid is None else pid
    found = pid
    for _ in range(64):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            break
        if b"ansible-playbook" in cmdline:
            found = pid
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        if parent <= 1:
            break
        pid = parent
    return found


def stale_reason(holder: Holder, now: float, host: str) -> str | None:
    if now > holder.renewed_at + holder.ttl_s:
        return f"its lease expired {now - holder.renewed_at - holder.ttl_s:.0f}s ago"
    if holder.host == host and not alive(holder.pid, holder.pid_starttime):
        return f"its process {holder.pid} on {host} is gone"
    return None


def read(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        # A torn or hand-edited file: treat as expired, but say so through the takeover report.
        return Holder("?", "unreadable lock file", "?", "?", 0, None, 0.0, 0.0, 0.0)
    return Holder(**data)


def _write(path: Path, holder: Holder) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(holder.as_dict(), indent=2) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    # Check-and-set under an flock, so two runs that both find a stale lease cannot both take it.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".guard"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def acquire(
    path: Path, pool: str, owner: str, run_id: str, ttl_s: float, pid: int, now: float | None = None
) -> tuple[Holder, dict[str, Any] | None]:
    """Take the lease (or renew it if this run holds it). Returns (holder, the stale lease taken over)."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    with _guard(path):
        current = read(path)
        taken_over = None
        if current is not None and current.run_id != run_id:
            why = stale_reason(current, now, host)
            if why is None:
                raise LockHeld(current)
            taken_over = {**current.as_dict(), "stale_because": why}
        acquired = current.acquired_at if current is not None and current.run_id == run_id else now
        holder = Holder(pool, owner, run_id, host, pid, starttime(pid), acquired, now, ttl_s)
        _write(path, holder)
        return holder, taken_over


def renew(path: Path, run_id: str, now: float | None = None) -> Holder:
    now = time.time() if now is None else now
    with _guard(path):
        current = read(path)
        if current is None or current.run_id != run_id:
            raise LockLost(f"{path}: this run ({run_id}) no longer holds the lease" + (f"; {current.describe()}" if current else ""))
        current.renewed_at = now
        _write(path, current)
        return current


def release(path: Path, run_id: str) -> bool:
    """Drop the lease if this run holds it; True when a lease was dropped."""
    with _guard(path):
        current = read(path)
        if current is None or current.run_id != run_id:
            return False
        path.unlink()
        return True
