"""Run a node tool and read small system files the way every preflight module needs to.

A probe returns ``(output, None)`` or ``(None, error)``; the error is one line an operator can act
on (``ibv_devinfo: command not found``, the tool's own last stderr line), never a traceback,
because it ends up verbatim in the report's ``observed`` column.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Protocol

# Tools live in /usr/sbin or /sbin on some distributions, and those are not on a non-root PATH;
# they are searched after PATH, so what PATH names first (an operator's override) wins.
EXTRA_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/local/nvidia/bin")


class Runner(Protocol):
    """The part of AnsibleModule a probe uses (tests pass a subprocess-backed stand-in)."""

    def run_command(self, args: Any, **kwargs: Any) -> tuple[int, str, str]: ...


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def which(name: str) -> str | None:
    search = os.pathsep.join([*os.environ.get("PATH", os.defpath).split(os.pathsep), *EXTRA_DIRS])
    return shutil.which(name, path=search)


def run_tool(runner: Runner, argv: list[str], ok_rcs: tuple[int, ...] = (0,)) -> tuple[str | None, str | None]:
    path = which(argv[0])
    if path is None:
        return None, f"{argv[0]}: command not found"
    rc, out, err = runner.run_command([path, *argv[1:]])
    if rc not in ok_rcs:
        return None, f"{' '.join(argv)} exited {rc}: {last_line(err) or last_line(out) or 'no output'}"
    return out, None


def read_file(path: str) -> tuple[str | None, str | None]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(), None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"


def existing_parent(path: str) -> str:
    """``path`` or its closest existing ancestor: a cache dir that warm-up has not created yet
    still has a filesystem to measure."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def fs_bytes(path: str) -> tuple[int, int]:
    """(size, available to unprivileged users) of the filesystem holding ``path``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
