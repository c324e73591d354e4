"""A clean stop compacts every minute the head holds, however many hosts: with more host-minutes than one
flush compacts (head.COMPACT_BATCH), it used to compact the same minutes again and again in one transaction
(the head learns what a flush did only at commit) and the stop never ended."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import head
from gpufleet.collector.store.store import Store

from tests.builders import snap
from tests.builders import store_gpu as gpu
from tests.store.conftest import FAST

pytestmark = pytest.mark.timeout(60)

T0 = 1_765_000_000.0 // 60 * 60


async def test_a_clean_stop_compacts_more_host_minutes_than_one_flush_takes(config: StorageConfig) -> None:
    hosts = head.COMPACT_BATCH + 20
    s = await Store.open(config, tuning=FAST)
    try:
        for i in range(3):
            for h in range(hosts):
                s.submit_snapshot(f"h{h}", snap(gpu(0, util=i), ts=T0 + 30 * i), T0 + 30 * i)
        await s.flush()
    finally:
        await asyncio.wait_for(s.close(), 60)
    conn = sqlite3.connect(config.resolved_path())
    try:
        assert conn.execute("SELECT count(*) FROM chunk_parts").fetchone()[0] == 0
        assert conn.execute("SELECT count(*), sum(n) FROM chunks WHERE piece = 0").fetchone() == (
            2 * hosts, 3 * hosts)
    finally:
        conn.close()
