"""The root of the test kit: puts tests/ on sys.path so every directory (and the benches) imports the one
builders module (`from builders import gpu, proc, snap, FakeClock, free_port`), and the shared fixtures."""

from __future__ import annotations

import pytest

from tests.builders import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand (directories that need another start time override this fixture)."""
    return FakeClock()
