"""The root of the test kit: puts tests/ on sys.path so every directory (and the benches) imports the one
builders module (`from builders import gpu, proc, snap, FakeClock, free_port`), and the shared fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from builders import FakeClock  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand (directories that need another start time override this fixture)."""
    return FakeClock()
