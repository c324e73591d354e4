"""Fixtures for the store tests: a fresh SQLite file per test, short batching delays."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store, Tuning

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
