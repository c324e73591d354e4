"""Fixtures for the store tests: a fresh SQLite file per test, short batching delays, a small file system."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MiB file system (tmpfs) to fill up; skipped where mounting is not allowed."""
    mnt = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small file system")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
