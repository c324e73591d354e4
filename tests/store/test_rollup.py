"""Rollups (min/mean/max per minute and hour), resolution choice, retention in batches, file shrinking."""

from __future__ import annotations

import dataclasses
import sqlite3
from statistics import mean

import pytest
from gpufleet.agent import wire
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import chunkcodec, chunkrows, raw, rollup, schema
from gpufleet.collector.store.store import Store, Tuning

from tests.builders import GIB, snap
from tests.builders import store_gpu as gpu
from tests.builders import store_proc as proc

T0 = 36000.0  # an hour boundary
STEP = 10.0
N = 780  # 2 h 10 min of samples, one every 10 s


def _values(k: int) -> tuple[int, int, int, float]:
    return (k * 7) % 101, (k % 13) * GIB, 30 + k % 50, 100.0 + k % 17  # util, mem, temp, power


async def _feed(s: Store, n: int = N, t0: float = T0, step: float = STEP) -> None:
    for k in range(n):
        util, mem, temp, power = _values(k)
        s.submit_snapshot("h1", snap(gpu(0, util=util, mem=mem, temp=temp, power=power),
                                     gpu(1, util=3, mem=GIB, temp=40, power=60.0), ts=t0 + k * step), 0.0)
        if k % 1000 == 999:
            await s.flush()  # history fed at a pace the writer keeps up with: nothing is shed
    await s.flush()
    assert s.shed == 0


def _expected(size: int) -> dict[int, tuple[int, float, float, float, int, int]]:
    """bucket -> (n, util min, util mean, util max, temp max, mem max) from the data fed."""
    buckets: dict[int, list[int]] = {}
    for k in range(N):
        buckets.setdefault(int((T0 + k * STEP) // size) * size, []).append(k)
    out: dict[int, tuple[int, float, float, float, int, int]] = {}
    for b, ks in buckets.items():
        utils = [_values(k)[0] for k in ks]
        out[b] = (len(ks), min(utils), mean(utils), max(utils), max(_values(k)[2] for k in ks),
                  max(_values(k)[1] for k in ks))
    return out


def _rows(config: StorageConfig, table: str) -> dict[int, tuple[int, float, float, float, float, float]]:
    with sqlite3.connect(config.resolved_path()) as conn:
        rows = conn.execute("SELECT bucket, n, util_min, util_mean, util_max, temp_max, mem_max "
                            f"FROM {table} WHERE gpu_id = (SELECT id FROM gpus WHERE uuid = 'GPU-0000')"
                            ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


async def test_minute_and_hour_rollups(store: Store, config: StorageConfig) -> None:
    await _feed(store)
    now = T0 + N * STEP + 100
    await store.run_maintenance(now)
    minutes, hours = _rows(config, "samples_1m"), _rows(config, "samples_1h")
    want_m, want_h = _expected(60), _expected(3600)
    assert set(minutes) == set(want_m)  # every minute ended more than `grace` before now
    for b, (n, lo, avg, hi, temp, mem) in want_m.items():
        assert minutes[b] == pytest.approx((n, lo, avg, hi, temp, mem))
    assert set(hours) == {int(T0), int(T0) + 3600}  # the third hour is not complete
    for b in hours:
        assert hours[b] == pytest.approx(want_h[b])
    await store.run_maintenance(now)  # idempotent
    assert _rows(config, "samples_1m") == minutes and _rows(config, "samples_1h") == hours


async def test_resolution_choice_and_on_the_fly_tail(store: Store, config: StorageConfig) -> None:
    await _feed(store)
    end = T0 + (N - 1) * STEP

    async def res(since: float, until: float, max_points: int) -> tuple[str, float | None, int]:
        (s0, s1) = await store.gpu_history("h1", since=since, until=until, max_points=max_points)
        assert (s0.resolution, s0.step) == (s1.resolution, s1.step)
        return s0.resolution, s0.step, len(s0.points)

    before = await store.gpu_history("h1", gpu=0, since=T0, until=end, max_points=500)
    assert (before[0].resolution, before[0].step) == ("1m", 60.0)  # 780 raw points > 500
    await store.run_maintenance(T0 + 5000)  # part rolled up: the rest comes from raw on the fly
    middle = await store.gpu_history("h1", gpu=0, since=T0, until=end, max_points=500)
    await store.run_maintenance(end + 100)
    after = await store.gpu_history("h1", gpu=0, since=T0, until=end, max_points=500)
    assert middle[0].points == pytest.approx(before[0].points) and len(before[0].points) == 130
    assert after[0].points == pytest.approx(before[0].points)
    for p in after[0].points:
        n, lo, avg, hi, temp, mem = _expected(60)[int(p.ts)]
        assert (p.util_mean, p.util_max, p.temp_max, p.mem_used_max) == pytest.approx((avg, hi, temp, mem))

    assert await res(T0, T0 + 300, 500) == ("raw", None, 31)
    assert await res(T0, end, 50) == ("1m", 180.0, 44)
    assert await res(T0, end, 10) == ("1h", 3600.0, 3)
    hourly = (await store.gpu_history("h1", gpu=0, since=T0, until=end, max_points=10))[0].points
    for p in hourly:  # the third hour is not rolled up yet: it is merged from 1m and raw rows
        assert p.util_mean == pytest.approx(_expected(3600)[int(p.ts)][2])
        assert p.util_max == _expected(3600)[int(p.ts)][3]
    widest = await res(T0, end, 1)  # 3-hour steps, aligned to multiples of 3 h (stable across queries)
    assert widest[:2] == ("1h", 3 * 3600.0) and widest[2] <= 2


async def test_raw_only_within_raw_retention(config: StorageConfig) -> None:
    cfg = dataclasses.replace(config, raw_retention=3600.0)
    s = await Store.open(cfg)
    await _feed(s)
    now = T0 + N * STEP + 100
    await s.run_maintenance(now)
    old = await s.gpu_history("h1", gpu=0, since=T0, until=T0 + 300)  # raw deleted: minutes instead
    recent = await s.gpu_history("h1", gpu=0, since=now - 600, until=now)
    await s.close()
    assert (old[0].resolution, len(old[0].points)) == ("1m", 6)
    assert old[0].points[0].util_mean == pytest.approx(_expected(60)[int(T0)][2])
    assert recent[0].resolution == "raw"


def test_retention_deletes_in_batches() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    schema.migrate(conn)
    conn.execute("INSERT INTO hosts (id, name) VALUES (1, 'h')")
    conn.execute("INSERT INTO gpus (id, uuid, host_id, idx, first_seen, last_seen) "
                 "VALUES (1, 'u', 1, 0, 0, 0)")
    minute = [(1, float(t), 1, *[None] * 11) for t in range(60)]
    chunkrows.insert(conn, [(1, m, 60, chunkcodec.encode([(1, t + m, *rest) for _, t, *rest in minute]))
                            for m in range(0, 1020, 60)])  # 17 minutes of 1 Hz
    conn.execute("INSERT INTO meta VALUES ('m1_upto', 100000)")
    policy = rollup.Policy(raw_retention=100.0, minute_retention=1e9, hour_retention=1e9, batch=5)
    now = 850.0  # whole minutes that end by 750 go: 0 .. 660
    done = []
    while True:
        more = rollup.delete_raw(conn, now, policy)
        done.append(conn.execute("SELECT count(DISTINCT span) FROM chunks").fetchone()[0])
        if not more:
            break
    assert done == [12, 7, 5]
    assert raw.all_rows(conn)[0][1] == 720.0  # the minute holding the cutoff stays, whole
    assert conn.execute("SELECT value FROM meta WHERE key = 'raw_from'").fetchone()[0] == 750.0


async def test_retention_and_the_file_shrinks(config: StorageConfig) -> None:
    cfg = dataclasses.replace(config, raw_retention=600.0, minute_retention=2 * 3600.0,
                              hour_retention=86400.0)
    s = await Store.open(cfg, tuning=Tuning(delete_batch=500, vacuum_slack=0))
    await _feed(s, n=3000, step=2.0)  # 6000 raw rows over 100 minutes
    path = cfg.resolved_path()
    await s.checkpoint()
    with sqlite3.connect(path) as conn:
        pages_before = conn.execute("PRAGMA page_count").fetchone()[0]
    await s.run_maintenance(T0 + 6000)
    with sqlite3.connect(path) as conn:
        left = raw.all_rows(conn)
    assert (min(r[1] for r in left), len(left)) == (T0 + 5400, 600)  # 10 minutes kept
    assert _rows(cfg, "samples_1m")  # the deleted raw rows live on as minutes
    far = T0 + 10 * 86400  # everything is past every window now
    await s.run_maintenance(far)
    await s.checkpoint()
    with sqlite3.connect(path) as conn:
        counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("chunks", "samples_1m", "samples_1h", "usage", "processes")]
        pages_after, free = (conn.execute("PRAGMA page_count").fetchone()[0],
                             conn.execute("PRAGMA freelist_count").fetchone()[0])
    await s.close()
    assert counts == [0, 0, 0, 0, 0]
    assert free == 0 and pages_after < pages_before


async def test_late_samples_are_rolled_up_again(store: Store, config: StorageConfig) -> None:
    """An agent whose clock runs 2 h behind the collector: all its samples arrive "late"."""
    await _feed(store)  # h1: on time, rolled up as it goes
    now = T0 + N * STEP + 100
    await store.run_maintenance(now)
    behind = 7200.0
    for k in range(N):  # h2's samples carry timestamps 2 h older than the collector's clock
        util = _values(k)[0]
        store.submit_snapshot("h2", snap(gpu(0, uuid="GPU-late", util=util), ts=T0 - behind + k * STEP), 0.0)
        if k % 100 == 0:
            await store.flush()
            await store.run_maintenance(now + k * STEP)
    await store.flush()
    await store.run_maintenance(now + N * STEP)
    with sqlite3.connect(config.resolved_path()) as conn:
        assert conn.execute("SELECT count(*) FROM rollup_dirty").fetchone()[0] == 0
        minutes = dict(conn.execute("SELECT bucket - ?, util_mean FROM samples_1m WHERE gpu_id = "
                                    "(SELECT id FROM gpus WHERE uuid = 'GPU-late')", (int(T0 - behind),)))
        hours = dict(conn.execute("SELECT bucket - ?, util_max FROM samples_1h WHERE gpu_id = "
                                  "(SELECT id FROM gpus WHERE uuid = 'GPU-late')", (int(T0 - behind),)))
    want_m, want_h = _expected(60), _expected(3600)
    assert set(minutes) == {b - int(T0) for b in want_m}
    for b, row in want_m.items():
        assert minutes[b - int(T0)] == pytest.approx(row[2])
    assert hours == {b - int(T0): row[3] for b, row in want_h.items()}  # its last hour too: it is over
    old = await store.gpu_history("h2", since=T0 - behind, until=T0 - behind + N * STEP, max_points=10)
    assert old[0].resolution == "1h" and [p.util_max for p in old[0].points] == [
        row[3] for _, row in sorted(want_h.items())]


async def test_file_size_stays_bounded_in_steady_state(config: StorageConfig) -> None:
    """18 h of a host at a steady rate, maintenance every 10 minutes of simulated time (the ``now``
    argument): once every window is full (raw 30 min, 1m 3 h, 1h and process/usage/event history 6 h) the
    file stops growing and every table holds a constant number of rows."""
    cfg = dataclasses.replace(config, raw_retention=1800.0, minute_retention=3 * 3600.0,
                              hour_retention=6 * 3600.0, batch_max_delay=0.01)
    s = await Store.open(cfg, tuning=Tuning(delete_batch=2000, vacuum_slack=32))
    path = cfg.resolved_path()
    tables = ("chunks", "samples_1m", "samples_1h", "processes", "usage", "events")
    t, step = T0, 5.0
    history: list[tuple[float, int, int, list[int]]] = []  # (hours, pages, wal bytes, row counts)
    try:
        for _ in range(18 * 6):
            for k in range(120):
                pid = 100 + int(t // 900)  # a new process every 15 minutes: spans come and go too
                s.submit_snapshot("h1", snap(*[gpu(i, util=int(t) % 100, power=100.5 + i, procs=[
                    proc(pid, start=t - t % 900, user=f"u{pid % 3}")]) for i in range(4)], ts=t), t)
                if k % 60 == 0:
                    s.submit_event("h1", wire.Event(ts=t, kind="xid", xid=13, message="Xid 13"), t)
                t += step
            await s.flush()
            await s.run_maintenance(t)
            await s.checkpoint()
            with sqlite3.connect(path) as conn:
                pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
                counts = [int(conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]) for name in tables]
            history.append(((t - T0) / 3600, pages, path.with_name(path.name + "-wal").stat().st_size,
                            counts))
    finally:
        await s.close()
    filling = [h for h in history if 6 < h[0] <= 12]
    steady = [h for h in history if h[0] > 12]
    assert max(h[1] for h in steady) <= max(h[1] for h in filling) + 2  # pages: no creeping growth
    assert path.stat().st_size <= (max(h[1] for h in filling) + 2) * 4096
    assert max(h[2] for h in steady) <= 2 * max(h[2] for h in filling)  # the WAL is reused, not grown
    # raw 30 min (29 whole minutes of the host: one chunk each), 1m 3 h, 1h 6 h: 4 GPUs each
    assert steady[-1][3][:3] == [29, 4 * 179, 4 * 5]
    for n, name in enumerate(tables):  # and no table keeps growing
        assert max(h[3][n] for h in steady) <= max(h[3][n] for h in filling), name


async def test_unused_gpu_rows_are_pruned_and_may_come_back(config: StorageConfig) -> None:
    """Issue 12: GPU rows were never pruned (new UUIDs every frame: 580k rows). Once retention has deleted a
    GPU's whole history, its row goes too; the same UUID seen again is registered again."""
    cfg = dataclasses.replace(config, raw_retention=600.0, minute_retention=2 * 3600.0,
                              hour_retention=86400.0)
    s = await Store.open(cfg, tuning=Tuning(delete_batch=7))
    for i in range(20):  # twenty GPUs seen once each, long ago (UUID churn)
        s.submit_snapshot("h1", snap(gpu(0, uuid=f"GPU-churn-{i}", procs=[proc(100 + i)]), ts=T0 + i), T0 + i)
    far = T0 + 10 * 86400
    s.submit_snapshot("h1", snap(gpu(0, uuid="GPU-live"), ts=far - 5), far - 5)
    await s.flush()
    await s.run_maintenance(far)
    path = cfg.resolved_path()
    with sqlite3.connect(path) as conn:
        left = sorted(r[0] for r in conn.execute("SELECT uuid FROM gpus"))
        placements = conn.execute("SELECT count(*) FROM gpu_placements").fetchone()[0]
    assert left == ["GPU-live"] and placements <= 1
    s.submit_snapshot("h1", snap(gpu(0, uuid="GPU-churn-3", procs=[proc(7)]), ts=far + 1), far + 1)
    await s.flush()  # the writer's id cache forgot the pruned row: no foreign-key error, no dropped frame
    latest = {g.uuid for snap in (await s.latest()).values() for g in snap.gpus}
    rejected = s.rejected
    await s.close()
    assert "GPU-churn-3" in latest and rejected == 0
