"""The store inside the real collector daemon: SQLITE_FULL -> a firing "storage" alert, reads keep working,
the alert resolves (and history is written again) once space returns; SIGTERM commits what was received."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.store.store import Store

from tests.builders import cap_store_pages


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _storage_alerts(collector: Collector) -> list[str]:
    return [a.state for a in collector.alerts.active() if a.rule == "storage"]


async def test_disk_full_fires_and_resolves_the_storage_alert(tmp_path: Path) -> None:
    async with SimFleet(1, mode="inproc", interval=0.05, gpus=8) as fleet:
        cfg = Config(hosts=fleet.host_configs(), rules=default_rules(),
                     storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=0.02),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")))
        (host,) = fleet.hosts
        collector = Collector(cfg)
        await collector.start()
        try:
            store = collector.store
            await _until(lambda: collector.live.hosts[host].snapshot is not None, "a first snapshot")
            await store.flush()
            assert await store.latest(host) and store.healthy and _storage_alerts(collector) == []

            cap_store_pages(store, None)  # the file may not grow any more: the next batches hit SQLITE_FULL
            await _until(lambda: not store.healthy, "writes to fail")
            assert store.last_error is not None and "full" in store.last_error
            await _until(lambda: _storage_alerts(collector) == ["firing"], "a firing storage alert")
            (alert,) = [a for a in collector.alerts.active() if a.rule == "storage"]
            assert alert.severity == "critical" and "full" in alert.annotations.get("error", "")

            # reads keep working while writes fail: the last committed sample is served, twice the same
            frozen = (await store.latest(host))[host].ts
            await asyncio.sleep(0.3)  # several snapshots arrive meanwhile; none can be committed
            assert (await store.latest(host))[host].ts == frozen
            (series, *_) = await store.gpu_history(host, since=0, until=1e12)
            assert series.points and series.points[-1].ts == frozen
            assert collector.live.hosts[host].status == "up"  # the live view is unaffected

            cap_store_pages(store, 1 << 30)  # space returns
            await _until(lambda: store.healthy, "writes to work again")
            await _until(lambda: _storage_alerts(collector) == [], "the storage alert to resolve")
            await _until(lambda: collector.live.hosts[host].snapshot is not None
                         and collector.live.hosts[host].snapshot.ts > frozen, "a newer snapshot")
            await store.flush()
            assert (await store.latest(host))[host].ts > frozen  # history is written again

            async def saved_resolved() -> bool:
                rows = await store.load_alerts(active_only=False)
                return any(a.rule == "storage" and a.state == "resolved" for a in rows)

            for _ in range(100):  # the engine retries its failed saves on its next ticks
                if await saved_resolved():
                    break
                await asyncio.sleep(0.1)
            assert await saved_resolved()
        finally:
            await collector.stop()


async def test_sigterm_commits_everything_received(tmp_path: Path) -> None:
    """What the collector has received is what it keeps: on SIGTERM it stops the transport first, then
    closes the store, which commits the queue. Every host's last frame is in the file afterwards."""
    async with SimFleet(3, mode="inproc", interval=0.02, gpus=8) as fleet:
        cfg = Config(hosts=fleet.host_configs(), rules=default_rules(),
                     storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=5.0),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")))
        collector = Collector(cfg)
        served = asyncio.create_task(collector.serve_forever())
        await _until(lambda: all(h.snapshot is not None and h.snapshot.seq >= 20
                                 for h in collector.live.hosts.values()), "snapshots from every host")
        store = collector.store
        assert store.queue_depth > 0  # a 5 s batch delay: frames are waiting for their commit
        os.kill(os.getpid(), signal.SIGTERM)  # serve_forever's handler turns it into a clean stop
        await asyncio.wait_for(served, 30)
        last = {name: h.snapshot.ts for name, h in collector.live.hosts.items() if h.snapshot is not None}
        assert store.dropped == 0 and store.rejected == 0
    assert len(last) == 3
    ro = await Store.open(cfg.storage, readonly=True)
    try:
        for name, ts in last.items():
            stored = (await ro.latest(name))[name]
            assert len(stored.gpus) == 8 and stored.ts == ts, name
    finally:
        await ro.close()
    with sqlite3.connect(cfg.storage.resolved_path()) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
