"""The local platform as a session fixture: one real platform for every integration test.

``local_platform`` starts it once (free ports below the ephemeral range, a temporary state dir)
and yields a :class:`inferplane.local.handle.PlatformHandle` (state.json endpoints plus helpers:
``generate``, ``workers``, ``mooncake_leader``, ``prom_query``, ``firing``, ``faults``,
``group_restart``, ``proc``, ``wait_for``, ``restore``). Tests that break something put it back
(``restore()`` brings every process, version, fault and SMG registration back to the baseline).
At the end of the session everything it started is stopped and the state dir's tag is checked
against /proc.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferplane.local import LocalPlatform, load_config, proc
from inferplane.local.handle import PlatformHandle, free_base_port


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.integration)


def start_platform(state_dir: Path, **overrides: object) -> PlatformHandle:
    cfg = load_config(state_dir=str(state_dir), **overrides)
    platform = LocalPlatform(cfg, base_port=free_base_port(cfg), say=lambda msg: print(f"[local] {msg}"))
    try:
        platform.up()
    except BaseException:
        platform.down()
        raise
    return PlatformHandle(platform)


@pytest.fixture(scope="session")
def local_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHandle]:
    state_dir = Path(os.environ.get("INFERPLANE_IT_STATE_DIR") or tmp_path_factory.mktemp("local-platform"))
    handle = start_platform(state_dir)
    try:
        yield handle
    finally:
        handle.platform.down()
        left = proc.tagged(handle.state_dir)
        assert not left, f"processes of {handle.state_dir} still running after down: {left}"
