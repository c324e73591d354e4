"""Storage failures nobody noticed (issue 12.6): a second collector on one file is refused with the first
one's pid; a database file deleted or replaced under a running store turns it unhealthy for good and
fires `storage`; a damaged file read turns it unhealthy too (not an "internal error" and a healthy flag)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpufleet.collector.errors import StorageError
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig
from gpufleet.collector.store.store import Store

from tests.builders import snap
from tests.builders import store_gpu as gpu


async def test_second_writer_on_one_file_is_refused(config: StorageConfig) -> None:
    first = await Store.open(config)
    try:
        with pytest.raises(StorageError, match=rf"another gpufleet collector \(pid {os.getpid()}\)"):
            await Store.open(config)
        reader = await Store.open(config, readonly=True)  # the CLI's read-only fallback is not a writer
        await reader.close()
    finally:
        await first.close()
    again = await Store.open(config)  # released on close
    await again.close()


def test_a_second_collector_process_exits_with_the_reason(tmp_path: Path) -> None:
    db = tmp_path / "one.db"

    def cfg(name: str) -> Path:
        p = tmp_path / f"{name}.yaml"
        p.write_text(f"hosts: []\nstorage:\n  path: {db}\napi:\n  socket: {tmp_path / name}.sock\n")
        return p

    env = {**os.environ, "HOME": str(tmp_path)}
    run = [sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c"]
    first = subprocess.Popen([*run, str(cfg("a"))], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if (tmp_path / "a.sock").exists():
                break
            time.sleep(0.05)
        second = subprocess.run([*run, str(cfg("b"))], env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert f"another gpufleet collector (pid {first.pid}) is writing this database" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()
        first.wait(30)


async def test_deleted_database_file_fires_storage(tmp_path: Path) -> None:
    cfg = Config(hosts=[], storage=StorageConfig(path=str(tmp_path / "h.db"), batch_max_delay=0.02),
                 api=ApiConfig(socket=str(tmp_path / "api.sock")))
    collector = Collector(cfg)
    await collector.start()
    try:
        assert collector.store.healthy
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp_path / "h.db") + suffix).unlink(missing_ok=True)
        await collector.store.run_maintenance(1e9)  # what the daemon runs every minute
        assert not collector.store.healthy and "deleted" in (collector.store.last_error or "")
        collector.store.submit_snapshot("h", snap(gpu(0), ts=1000.0), 1000.0)
        await collector.store.flush()  # a commit that succeeds (into the unlinked file) does not hide it
        assert not collector.store.healthy
        await collector.alerts.evaluate()
        [alert] = [a for a in collector.alerts.active() if a.rule == "storage"]
        assert "deleted" in alert.annotations["summary"]
    finally:
        await collector.stop()


async def test_damaged_file_is_reported_as_storage(config: StorageConfig) -> None:
    s = await Store.open(config)
    for i in range(300):
        s.submit_snapshot("h1", snap(gpu(0), gpu(1), ts=1000.0 + i), 1000.0 + i)
    await s.flush()
    await s.close()
    path = config.resolved_path()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'chunks'")]
    assert pages
    with open(path, "r+b") as f:  # scribble over the samples table: a bad disk sector under the history
        for page in pages:
            f.seek((page - 1) * size)
            f.write(b"\xa5" * size)
    changes: list[tuple[bool, str | None]] = []
    try:
        s = await Store.open(config)
    except StorageError as exc:  # damaged where the schema lives: refused at open, with the file named
        pytest.fail(f"the header page was kept, open should work: {exc}")
    s.on_health_change = lambda ok, msg: changes.append((ok, msg))
    try:
        with pytest.raises(StorageError, match="malformed|not a database"):
            await s.gpu_history("h1", since=0.0, until=2000.0)
        assert not s.healthy and changes and changes[-1][0] is False
        assert "damaged" in (s.last_error or "")
    finally:
        await asyncio.wait_for(s.close(), 60)
