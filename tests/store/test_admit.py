"""Issue 38 item 3: the store bounds time and values itself, whatever path a frame came by; a clock step back
neither stops nor doubles GPU-hours; maintenance survives any row an old file may hold."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from gpufleet.agent import wire
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store

from tests.builders import gpu, heartbeat, hello, proc, snap, stored_samples

YEARS_10 = 10 * 365.25 * 86400


def _q(config: StorageConfig, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with sqlite3.connect(config.resolved_path()) as conn:
        return conn.execute(sql, args).fetchall()


def _held_seconds(rows: list[object]) -> float:
    return sum(r.gpu_hours_held for r in rows) * 3600  # type: ignore[attr-defined]


async def test_times_outside_the_window_and_impossible_values_are_refused(store: Store,
                                                                          config: StorageConfig) -> None:
    now = time.time()
    alice = [proc(7, start=now - 100)]
    store.submit_snapshot("h1", snap(gpu(0, procs=alice), ts=now - 2), now - 2)  # a good one first
    bad = [
        snap(gpu(0, procs=alice), ts=now + YEARS_10),  # moved last-seen 10 years ahead
        snap(gpu(0, procs=alice), ts=-1e300),  # broke every later maintenance
        snap(gpu(0, util=float("nan")), ts=now),  # type: ignore[arg-type]
        snap(gpu(0, power=float("inf")), ts=now),
        snap(gpu(0, mem=1 << 70), ts=now),
        snap(gpu(0, temp=10_000), ts=now),
        snap(gpu(0, procs=[proc(-5)]), ts=now),
        snap(gpu(0, procs=[proc(8, start=now + YEARS_10)]), ts=now),
        snap(gpu(0, util="40"), ts=now),  # type: ignore[arg-type]
    ]
    for frame in bad:
        store.submit_snapshot("h1", frame, now)
    store.submit_snapshot("h1", snap(gpu(0), ts=now), -1e300)  # a receive time no clock gives
    store.submit_event("h1", wire.Event(ts=-1e300, kind="xid", message="Xid 79", xid=79), now)
    store.submit_event("h1", wire.Event(ts=now, kind="xid", message="Xid", xid=1 << 70), now)
    store.submit_hello("h1", hello([wire.GpuInfo(index=0, uuid="GPU-0000", memory_total=-1)], ts=now), now)
    store.submit_heartbeat("h1", heartbeat(now + YEARS_10), now)
    store.submit_host_state(HostState(name="h2", status="up", since=now + YEARS_10, last_seen=now))
    store.submit_snapshot("h1", snap(gpu(0, procs=alice), ts=now - 1), now - 1)  # and a good one after
    await store.flush()
    assert [(r[1],) for r in stored_samples(config.resolved_path())] == [(now - 2,), (now - 1,)]
    assert _q(config, "SELECT count(*) FROM events") == [(0,)]
    assert _q(config, "SELECT max(last_seen) FROM processes") == [(now - 1,)]
    assert _q(config, "SELECT name, last_seen <= ? FROM hosts", now + 1) == [("h1", 1)]  # nor h2's record
    assert store.refused == len(bad) + 6 and store.healthy and store.rejected == 0


async def test_a_ten_minute_clock_step_back_credits_each_real_second_once(store: Store) -> None:
    """Fed straight to the store (the stream edge is not involved): 60 s, then the collector's clock (and
    so the frames' and the receive times) steps back 600 s, 60 s more. The GPU was held 119 s: 59 were
    credited before (every sample after the step counted as late). A replay of the first minute, received
    later, adds nothing."""
    t0 = time.time() - 120
    held = [proc(7, start=t0 - 500, mem_gib=4)]
    frames = [snap(gpu(0, procs=held, util=50), ts=t0 + i, seq=i) for i in range(60)]
    for f in frames:
        store.submit_snapshot("h1", f, f.ts)
    stepped = t0 + 60 - 600
    for i in range(60):
        ts = stepped + i
        store.submit_snapshot("h1", snap(gpu(0, procs=held, util=50), ts=ts, seq=60 + i), ts)
    await store.flush()
    window = {"since": t0 - 7200, "until": t0 + 7200}
    assert _held_seconds(await store.usage_by_user(**window)) == pytest.approx(119, abs=0.5)
    for f in frames:  # the agent sends the first minute again: received now, a replay
        store.submit_snapshot("h1", f, time.time())
    await store.flush()
    assert _held_seconds(await store.usage_by_user(**window)) == pytest.approx(119, abs=0.5)
    spans = await store.process_history(**window)
    assert len(spans) == 1 and spans[0].last_seen == pytest.approx(t0 + 59)


async def test_maintenance_survives_rows_an_old_file_holds(tmp_path: Path) -> None:
    """Rows planted with sqlite3 into a real file, as an older collector could leave them: maintenance still
    rolls up, deletes what retention says, and the GPU's accounting goes on."""
    config = StorageConfig(path=str(tmp_path / "old.db"), raw_retention=3600.0, batch_max_delay=0.02)
    now = time.time()
    old_t0 = now - 3 * 3600  # an hour of samples past raw retention ...
    new_t0 = now - 1800  # ... and half an hour inside it
    s = await Store.open(config)
    for t0 in (old_t0, new_t0):
        for i in range(180):
            s.submit_snapshot("h1", snap(gpu(0, procs=[proc(7, start=old_t0 - 10, mem_gib=4)], util=i % 100),
                                         ts=t0 + 10 * i), t0 + 10 * i)
    await s.close()
    path = config.resolved_path()
    with sqlite3.connect(path) as conn:
        (gid,) = conn.execute("SELECT id FROM gpus").fetchone()
        hid = conn.execute("SELECT host_id FROM gpus").fetchone()[0]
        conn.executemany("INSERT INTO chunks (host_id, span, piece, n, data) VALUES (?, ?, 0, 1, x'01')",
                         [(hid, -1e300), (hid, now + YEARS_10), (hid, "NaN"), (hid, float("inf")),
                          (hid, float("-inf")), (hid, 1e300)])
        conn.executemany("INSERT INTO rollup_dirty (gpu_id, bucket) VALUES (?, ?)",
                         [(gid, -1e300), (gid, "x"), (gid, 1e300)])
        conn.execute("INSERT INTO samples_1m (gpu_id, bucket, n) VALUES (?, ?, 1)", (gid, -1e300))
        host = conn.execute("SELECT id FROM hosts").fetchone()[0]
        conn.executemany("INSERT INTO events (host_id, ts, kind, message) VALUES (?, ?, 'xid', 'x')",
                         [(host, -1e300), (host, now + YEARS_10)])
        conn.execute("UPDATE processes SET last_seen = ?", (now + YEARS_10,))
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('h1_upto', 'garbage')")
    s = await Store.open(config)
    try:
        await s.run_maintenance(time.time())  # raised OverflowError on every run
        await s.run_maintenance(time.time())
        ts = [r[1] for r in stored_samples(config.resolved_path())]
        minutes = _q(config, "SELECT min(bucket), max(bucket), count(*) FROM samples_1m")[0]
        old_minutes = _q(config, "SELECT count(*) FROM samples_1m WHERE bucket < ?", old_t0 + 1800)[0][0]
        spans = _q(config, "SELECT last_seen FROM processes")
        events = _q(config, "SELECT count(*) FROM events")[0][0]
        dirty = _q(config, "SELECT count(*) FROM rollup_dirty")[0][0]
        # ... and the GPU's accounting goes on: the next sample is credited, not "late" behind 10 years
        before = _held_seconds(await s.usage_by_user(since=now - 86400, until=now + 86400))
        for i in range(1, 4):
            s.submit_snapshot("h1", snap(gpu(0, procs=[proc(7, start=old_t0 - 10, mem_gib=4)]),
                                         ts=time.time() + i * 0.01), time.time())
        await s.flush()
        after = _held_seconds(await s.usage_by_user(since=now - 86400, until=now + 86400))
    finally:
        await s.close()
    assert all(isinstance(t, float) and now - 3600 - 300 <= t <= time.time() for t in ts), sorted(ts)[:3]
    assert len(ts) >= 170  # the half hour inside retention is kept; the older hour and every bad row went
    # rolled up: the older half hour's minutes (its raw rows are gone) and most of the newer one's
    assert minutes[0] >= old_t0 - 60 and minutes[1] <= now and minutes[2] >= 55 and old_minutes >= 29
    assert len(spans) == 1 and float(spans[0][0]) <= time.time()
    assert events == 0 and dirty == 0
    assert after > before
