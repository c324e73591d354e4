"""Fixtures for the store tests: a fresh SQLite file per test, short batching delays."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for store_testlib (helpers shared by these tests)

from gpufleet.collector.settings import StorageConfig  # noqa: E402
from gpufleet.collector.store import Store, Tuning  # noqa: E402

FAST = Tuning(retry_interval=0.05, close_timeout=10.0)


@pytest.fixture
def config(tmp_path: Path) -> StorageConfig:
    return StorageConfig(path=str(tmp_path / "data" / "gpufleet.db"), batch_max_delay=0.02)


@pytest.fixture
async def store(config: StorageConfig) -> AsyncIterator[Store]:
    s = await Store.open(config, tuning=FAST)
    try:
        yield s
    finally:
        await s.close()
