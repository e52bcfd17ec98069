"""Preflight test helpers: the recorded H200 capture, the fake fleet's tool outputs, and a fake-tool PATH."""

from __future__ import annotations

import importlib.util
import os
import random
import socket
from pathlib import Path
from types import ModuleType

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "preflight"
TOOLS = ("nvidia-smi", "ibv_devinfo", "ibv_devices", "lsmod", "dmesg", "ofed_info", "systemctl", "ib_write_bw", "transfer_engine_bench")


def _load_fake_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("preflight_fake_tool", FIXTURES / "fakes" / "fake_tool.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_tool = _load_fake_tool()


@pytest.fixture(scope="session")
def h200(shared_dir: Path) -> Path:
    """The real single-H200 capture (../shared/fixtures/nvidia-h200-1gpu)."""
    return shared_dir / "fixtures" / "nvidia-h200-1gpu"


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory whose tools are the fake ones, first on PATH; pick the node with INFERPLANE_FAKE_VARIANT."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(FIXTURES / "fakes" / "fake_tool.py")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("INFERPLANE_FAKE_SERVER_TIMEOUT", "60")
    return bin_dir


_TAKEN: list[int] = []


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_block(size: int = 48) -> int:
    """The first of ``size`` free TCP ports below the kernel's ephemeral range.

    The fake Mooncake targets bind port 0 (ephemeral, like the real ones), so a block chosen below that range
    cannot be taken by a target between choosing it and an ib_write_bw server binding it.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(10000, max(10001, low - size))
        if any(abs(base - t) < size for t in _TAKEN):
            continue
        if all(_port_free(p) for p in range(base, base + size)):
            _TAKEN.append(base)
            return base
    raise RuntimeError("no free block of TCP ports below the ephemeral range")
