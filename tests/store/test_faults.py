"""Faults: kill -9 mid-ingest, disk full and recovery, a long reader vs checkpoints, read-only opens."""

from __future__ import annotations

import asyncio
import errno
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from gpufleet.collector.errors import StorageError, StorageFull
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import raw
from gpufleet.collector.store.store import Store, Tuning

from tests.builders import cap_store_pages, snap
from tests.builders import store_gpu as gpu
from tests.builders import store_proc as proc

# samples written with every batch (head_interval 0): the disk-full tests need each batch to take space
FAST = Tuning(retry_interval=0.05, close_timeout=5.0, head_interval=0.0)
CHILD = Path(__file__).with_name("ingest_child.py")


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


# ------------------------------------------------------------------------------------------- kill -9


def _run_child_and_kill(path: Path, first: int, lines: int) -> list[int]:
    child = subprocess.Popen([sys.executable, str(CHILD), str(path), str(first)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    committed: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            committed.append(int(line))
            if len(committed) >= lines:
                break
        child.send_signal(signal.SIGKILL)  # mid-stream: it is already submitting the next batch
    finally:
        child.kill()
        _, err = child.communicate(timeout=30)
    assert committed, f"child printed nothing; stderr:\n{err}"
    return committed


async def test_kill_9_loses_no_committed_sample(config: StorageConfig) -> None:
    path = config.resolved_path()
    path.parent.mkdir(parents=True)
    first = 0
    for _ in range(3):  # kill it three times, resuming each time
        committed = await asyncio.to_thread(_run_child_and_kill, path, first, 25)
        assert _integrity(path) == "ok"
        with sqlite3.connect(path) as conn:
            per_ts = Counter(r[1] for r in raw.all_rows(conn))
            present = {int(ts) - 1000 for ts, n in per_ts.items() if n == 8}
            events = {x for (x,) in conn.execute("SELECT DISTINCT CAST(ts AS INTEGER) - 1000 FROM events")}
        assert set(range(committed[-1] + 1)) <= present
        assert set(range(committed[-1] + 1)) <= events
        first = committed[-1] + 1
    s = await Store.open(config)  # the file opens and takes writes after the crashes
    s.submit_snapshot("h1", snap(gpu(0, uuid="GPU-0"), ts=999.0), 0.0)
    await s.flush()
    await s.close()
    assert _integrity(path) == "ok"


# ----------------------------------------------------------------------------------------- disk full


def _alert() -> AlertRecord:
    return AlertRecord(fingerprint="f", rule="storage", severity="critical", state="firing")


def _busy_snapshot(t: float) -> sample.Snapshot:
    return snap(*[gpu(i, procs=[proc(100 + i, command="x" * 200)]) for i in range(8)], ts=t)


async def _disk_full_round_trip(store: Store, fill: Callable[[], object], free: Callable[[], object]) -> None:
    """Shared by both disk-full tests. ``fill()`` makes the disk full, ``free()`` gives space back."""
    changes: list[tuple[bool, str | None]] = []
    store.on_health_change = lambda ok, msg: changes.append((ok, msg))
    for i in range(5):
        store.submit_snapshot("h1", _busy_snapshot(1000.0 + i), 0.0)
    await store.flush()
    fill()
    t, committed = 2000.0, 1004.0
    with pytest.raises(StorageFull):
        for _ in range(200):  # until the next batch no longer fits
            for _ in range(20):
                store.submit_snapshot("h1", _busy_snapshot(t), 0.0)
                t += 1
            await store.flush()
            committed = t - 1
    assert not store.healthy and store.last_error and "full" in store.last_error
    assert changes == [(False, store.last_error)]
    # reads keep working and see exactly what was committed
    assert (await store.latest("h1"))["h1"].ts == committed
    (series,) = await store.gpu_history("h1", gpu=0, since=0, until=1e9, max_points=100_000)
    assert series.points[-1].ts == committed
    with pytest.raises(StorageFull):
        await store.save_alerts([_alert()])
    with pytest.raises(StorageFull):
        await store.flush()
    submitted_while_full = t
    store.submit_snapshot("h1", _busy_snapshot(t), 0.0)
    free()
    for _ in range(200):  # the writer retries every retry_interval (0.05 s)
        if store.healthy:
            break
        await asyncio.sleep(0.05)
    assert store.healthy and store.last_error is None
    assert changes[-1] == (True, None) and len(changes) == 2
    await store.flush()
    await store.save_alerts([_alert()])
    assert [a.fingerprint for a in await store.load_alerts()] == ["f"]
    newest = (await store.latest("h1"))["h1"].ts
    assert newest == submitted_while_full  # the frames queued while full were written in the end
    assert store.dropped == 0


async def test_disk_full_max_page_count_rolls_back_and_recovers(config: StorageConfig) -> None:
    store = await Store.open(config, tuning=FAST)
    try:
        await _disk_full_round_trip(store, lambda: cap_store_pages(store, None),
                                    lambda: cap_store_pages(store, 1 << 30))
    finally:
        await store.close()
    assert _integrity(config.resolved_path()) == "ok"


async def test_disk_full_real_filesystem(small_fs: Path) -> None:
    cfg = StorageConfig(path=str(small_fs / "gpufleet.db"), batch_max_delay=0.01)
    filler = small_fs / "filler"
    store = await Store.open(cfg, tuning=FAST)

    def fill() -> None:
        with open(filler, "wb", buffering=0) as f:  # take all the space that is left
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    try:
        await _disk_full_round_trip(store, fill, filler.unlink)
    finally:
        await store.close()
    assert _integrity(Path(cfg.path)) == "ok"


# ---------------------------------------------------------------------------------------- checkpoint


async def test_long_reader_does_not_stop_writes_or_starve_checkpoints(store: Store,
                                                                      config: StorageConfig) -> None:
    for i in range(20):
        store.submit_snapshot("h1", snap(gpu(0), gpu(1), ts=100.0 + i), 0.0)
    await store.flush()
    await store.checkpoint()
    reader = sqlite3.connect(config.resolved_path(), isolation_level=None)
    reader.execute("BEGIN")
    assert len(raw.all_rows(reader)) == 40  # holds this snapshot
    for i in range(20, 60):  # the writer keeps committing while the read transaction is open
        store.submit_snapshot("h1", snap(gpu(0), gpu(1), ts=100.0 + i), 0.0)
        await store.flush()
    assert (await store.latest())["h1"].ts == 159.0
    busy, frames, done = await store.checkpoint()
    assert busy == 0 and done < frames  # frames after the reader's snapshot must wait for it
    assert len(raw.all_rows(reader)) == 40  # its view is stable
    reader.execute("COMMIT")
    reader.close()
    busy, frames_after, done_after = await store.checkpoint()
    assert done_after == frames_after == frames  # the reader gone, the whole WAL is copied back
    store.submit_snapshot("h1", snap(gpu(0), ts=500.0), 0.0)
    await store.flush()
    _, restarted, _ = await store.checkpoint()
    assert restarted < frames  # the WAL was reset: new frames start from the beginning again


# ----------------------------------------------------------------------------------------- read-only


async def test_readonly_open_while_the_writer_is_active(store: Store, config: StorageConfig) -> None:
    store.submit_snapshot("h1", snap(gpu(0), ts=100.0), 0.0)
    await store.flush()
    ro = await Store.open(config, readonly=True)
    try:
        assert ro.readonly and ro.healthy and ro.queue_depth == 0
        assert [s.ts for s in (await ro.latest()).values()] == [100.0]
        store.submit_snapshot("h1", snap(gpu(0), ts=101.0), 0.0)
        await store.flush()
        assert [s.ts for s in (await ro.latest()).values()] == [101.0]  # sees each new commit
        with pytest.raises(StorageError, match="read-only"):
            ro.submit_snapshot("h1", snap(gpu(0), ts=102.0), 0.0)
        with pytest.raises(StorageError, match="read-only"):
            await ro.save_alerts([_alert()])
        with pytest.raises(StorageError, match="read-only"):
            await ro.run_maintenance(1000.0)
        ro.frame("h1", snap(gpu(0), ts=103.0), 0.0)  # the FleetSink face only logs
    finally:
        await ro.close()
    await store.run_maintenance(1000.0)  # the writer is unaffected


async def test_close_commits_what_is_queued(config: StorageConfig) -> None:
    s = await Store.open(config)
    for i in range(50):
        s.submit_snapshot("h1", snap(gpu(0), ts=100.0 + i), 0.0)
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        s.submit_snapshot("h1", snap(gpu(0), ts=200.0), 0.0)
    ro = await Store.open(config, readonly=True)
    pts = (await ro.gpu_history("h1", since=0, until=1e9))[0].points
    await ro.close()
    assert len(pts) == 50
