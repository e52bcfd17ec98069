"""Start, identify and signal the local platform's processes.

A PID alone is not an identity: after a reboot or a crash the number may belong to someone
else's process. Every process is recorded with its kernel start time and its arguments, and is
signalled only while the start time matches and the command line is still ours (or, for a
program that overwrites its argv with a title, as SMG does, the title). Each one runs in its own session (process group), so a
signal reaches the children a launcher script may leave behind, and carries an environment tag
naming the state dir, so `down` and the tests can prove nothing of ours survived.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TAG_ENV = "INFERPLANE_LOCAL_STATE_DIR"

# Popen objects of processes this Python process started, so exited ones are reaped (a zombie
# still has a /proc entry) instead of lingering until the test session ends.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Identity:
    pid: int
    starttime: int
    args: tuple[str, ...]  # argv without the program: launcher scripts rewrite argv[0]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: the fields start after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def starttime(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 of stat(5)


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has exited; only its exit status is left)."""
    _reap(pid)
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")  # type: ignore[index]


def stopped(pid: int) -> bool:
    """Paused by SIGSTOP."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] == "T"  # type: ignore[index]


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    if not raw:
        return []
    # A program that rewrote its argv pads its title with NULs (or leaves none at the end).
    return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]


def environ_tag(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    prefix = TAG_ENV.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def is_ours(ident: Identity) -> bool:
    """The recorded process is still the one we started: same start time, same arguments."""
    if not running(ident.pid) or starttime(ident.pid) != ident.starttime:
        return False
    argv = cmdline(ident.pid)
    n = len(ident.args)
    if len(argv) > n and tuple(argv[len(argv) - n :]) == ident.args:
        return True
    if environ_tag(ident.pid) is not None:
        return True
    # SMG overwrites its argv and environment with a title ("smg::router"): a single-string
    # cmdline is that title, and the matching start time already pins the process.
    return len(argv) == 1 and bool(ident.args)


def spawn(argv: Sequence[str], *, log: Path, env: Mapping[str, str], state_dir: Path, cwd: Path) -> Identity:
    """Start ``argv`` detached (own session), output appended to ``log``, tagged with the state dir."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env, TAG_ENV: str(state_dir)}
    with open(log, "ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(argv)}\n".encode())
        out.flush()
        child = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=cwd, start_new_session=True
        )
    _CHILDREN[child.pid] = child
    st = starttime(child.pid)
    if st is None:
        child.wait()
        raise RuntimeError(f"{argv[0]} exited at once (status {child.returncode}); see {log}")
    return Identity(child.pid, st, tuple(argv[1:]))


def signal_group(ident: Identity, sig: signal.Signals) -> bool:
    if not is_ours(ident):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(ident.pid, sig)
    return True


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(entry.name))
    return out


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.05)
    return not running(pid)


def wait_exit(pid: int, timeout: float, ports: Iterable[int] = (), linger: float = 3.0) -> bool:
    """Wait for a SIGTERMed process to exit. Once it has closed every listener in ``ports`` it has
    stopped serving (in-flight work is done); after ``linger`` more seconds of cleanup it counts as
    hung (a Mooncake store client's close can block exit for ~25 s) and the caller kills it."""
    return not wait_exit_all({pid: list(ports)}, timeout, linger)


def wait_exit_all(procs: Mapping[int, Iterable[int]], timeout: float, linger: float = 3.0) -> list[int]:
    """:func:`wait_exit` for several processes at once; returns the PIDs still running (hung)."""
    pending = {pid: list(ports) for pid, ports in procs.items()}
    closed_at: dict[int, float] = {}
    hung: list[int] = []
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for pid, ports in list(pending.items()):
            if not running(pid):
                del pending[pid]
                continue
            if ports and pid not in closed_at and not any(listening(p) for p in ports):
                closed_at[pid] = time.monotonic()
            if pid in closed_at and time.monotonic() - closed_at[pid] > linger:
                hung.append(pid)
                del pending[pid]
        if pending:
            time.sleep(0.05)
    return hung + [pid for pid in pending if running(pid)]


def terminate(ident: Identity, timeout: float = 15.0, ports: Iterable[int] = ()) -> bool:
    """SIGTERM the process group, wait (see :func:`wait_exit`), then SIGKILL whatever is left.
    False if it was not ours."""
    if not is_ours(ident):
        return False
    if stopped(ident.pid):
        # A paused process cannot act on SIGTERM until it runs again.
        signal_group(ident, signal.SIGCONT)
    signal_group(ident, signal.SIGTERM)
    if not wait_exit(ident.pid, timeout, ports):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ident.pid, signal.SIGKILL)
        wait_gone(ident.pid, 5.0)
    kill_stragglers(ident.pid)
    return True


def kill(ident: Identity) -> bool:
    if not is_ours(ident):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(ident.pid, signal.SIGKILL)
    wait_gone(ident.pid, 5.0)
    kill_stragglers(ident.pid)
    return True


def _until(check: Callable[[], bool], timeout: float = 2.0) -> None:
    # Signals are delivered asynchronously: callers expect the new state once we return.
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


def pause(ident: Identity) -> bool:
    if not signal_group(ident, signal.SIGSTOP):
        return False
    _until(lambda: stopped(ident.pid))
    return True


def resume(ident: Identity) -> bool:
    if not signal_group(ident, signal.SIGCONT):
        return False
    _until(lambda: not stopped(ident.pid))
    return True


def kill_stragglers(pgid: int) -> None:
    # Children a launcher left in the group after the leader exited.
    for pid in group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in group_members(pgid):
        wait_gone(pid, 2.0)


def tagged(state_dir: Path) -> list[int]:
    """Every live process carrying our state dir tag (children inherit it)."""
    want = str(state_dir)
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            pid = int(entry.name)
            if environ_tag(pid) == want and running(pid):
                out.append(pid)
    return out


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As servers do: TIME_WAIT leftovers of a killed process must not count as taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _listen_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(cols[9])
    return inodes


def listening(port: int) -> bool:
    """Someone listens on ``port`` (read from /proc; unlike a test bind, no side effect)."""
    return bool(_listen_inodes(port))


def port_owner(port: int) -> str | None:
    """'pid N (comm)' of the process listening on ``port``, when /proc tells us."""
    inodes = _listen_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in targets:
                    comm = (entry / "comm").read_text().strip()
                    return f"pid {entry.name} ({comm})"
        except OSError:
            continue
    return None
