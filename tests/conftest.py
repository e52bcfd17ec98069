"""Shared test helpers: repository paths and the ../shared reference data (CRDs, fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared holds real CRDs and recorded hardware outputs; a user's clone may lack it."""
    if not SHARED.is_dir():
        pytest.skip("../shared is absent (a user's clone): CRDs and hardware fixtures live there")
    return SHARED
