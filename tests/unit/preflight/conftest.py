"""Preflight test helpers: the recorded H200 capture, the fake fleet's tool outputs, and a fake-tool PATH."""

from __future__ import annotations

import importlib.util
import os
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
