"""Store benchmark (run by hand): ingest rate, history query time, database size per host-day.

    .venv/bin/python -m tests.bench.store_bench [--hosts 8] [--seconds 600] [--day] [--keep DIR]

1. Ingest: ``--hosts`` hosts x 8 GPUs (2 processes each) at 1 Hz for ``--seconds`` seconds of agent time,
   pushed through Store.submit_snapshot + flush (the real writer: batching, spans, usage, WAL,
   synchronous=FULL). Frames are built beforehand: building them is the transport's cost, not the store's.
2. Host-day: one host of 8 GPUs at 1 Hz for 24 h through the same path, then run_maintenance (rollups);
   reports the file size and the size per table (dbstat). ``--day`` runs it (about 20 s of ingest).
3. 30-day history of that host: the 24 h of raw data from step 2 (or from step 1 without ``--day``) plus
   29 earlier days of 1-minute and 1-hour rollups written directly (what maintenance leaves behind:
   raw past 24 h is gone), then Store.gpu_history over 30 days, 1 day, 1 hour, 5 minutes; median of runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store, Tuning

GIB = 1 << 30
DAY = 86400.0


def build_snapshots(host_count: int, seconds: int, t0: float,
                    procs_per_gpu: int = 2) -> list[tuple[str, sample.Snapshot]]:
    out: list[tuple[str, sample.Snapshot]] = []
    for s in range(seconds):
        ts = t0 + s + 0.123
        for h in range(host_count):
            gpus = []
            for i in range(8):
                util = (s * 7 + i * 13 + h) % 101
                procs = [sample.ProcessSample(pid=1000 + i * 2 + k, user=f"user{(h + i + k) % 5}",
                                            gpu_memory=(4 + k) * GIB, sm_util=util // (k + 1),
                                            command="python train.py --config big.yaml",
                                            start_time=t0 - 3600 + k, state="R")
                     for k in range(procs_per_gpu)]
                gpus.append(sample.GpuSample(index=i, uuid=f"GPU-{h:03d}-{i}", name="NVIDIA H100 80GB HBM3",
                                           util_gpu=util, util_mem=util // 2, memory_total=80 * GIB,
                                           memory_used=9 * GIB + s % 100 * 4096, temperature=40 + util // 4,
                                           power_draw=100.0 + util * 5.37, power_limit=700.0,
                                           clock_sm=1980, clock_mem=2619, fan_speed=None,
                                           ecc_corrected=0, ecc_uncorrected=0,
                                           throttle_reasons=["gpu_idle"] if util < 5 else None,
                                           processes=procs))
            out.append((f"host{h:03d}", sample.Snapshot(proto=wire.PROTO_VERSION, ts=ts, seq=s, gpus=gpus)))
    return out


def baseline_executemany(path: Path, frames: list[tuple[str, sample.Snapshot]], chunk: int = 5000) -> float:
    """Samples/s of plain ``executemany`` of the same sample rows, same schema and pragmas, batched like the
    writer (one BEGIN IMMEDIATE per ``chunk`` rows): the floor the store's ingest is measured against."""
    from gpufleet.collector.store._db import setup_writer

    from tests.bench import rowtable

    conn = sqlite3.connect(path, isolation_level=None)
    setup_writer(conn)
    rowtable.create(conn)
    conn.execute("INSERT INTO hosts (name) VALUES ('h')")
    ids: dict[str, int] = {}
    for _, snap in frames[:1000]:
        for g in snap.gpus:
            if g.uuid not in ids:
                ids[g.uuid] = len(ids) + 1
                conn.execute("INSERT INTO gpus (id, uuid, host_id, idx, first_seen, last_seen) "
                             "VALUES (?, ?, 1, ?, 0, 0)", (ids[g.uuid], g.uuid, g.index))
    start = time.perf_counter()
    rows = []
    for _, snap in frames:
        for g in snap.gpus:
            rows.append((ids.get(g.uuid, 1), snap.ts, g.util_gpu, g.util_mem, g.memory_used, g.temperature,
                         g.power_draw, g.clock_sm, g.clock_mem, g.fan_speed, g.ecc_corrected,
                         g.ecc_uncorrected, None, None))
            if len(rows) >= chunk:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(rowtable.INSERT, rows)
                conn.execute("COMMIT")
                rows.clear()
    if rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(rowtable.INSERT, rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return sum(len(s.gpus) for _, s in frames) / elapsed


async def ingest(store: Store, frames: list[tuple[str, sample.Snapshot]], chunk: int = 2000) -> float:
    """Submit everything (in chunks, as a live fleet would over time) and wait for the commit."""
    start = time.perf_counter()
    for i in range(0, len(frames), chunk):
        for host, snap in frames[i:i + chunk]:
            store.submit_snapshot(host, snap, snap.ts)
        await asyncio.sleep(0)  # let the writer take batches while we keep submitting
        while store.queue_depth > 4 * chunk:
            await asyncio.sleep(0.01)
    await store.flush()
    return time.perf_counter() - start


def table_sizes(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    return {name: int(size) for name, size in rows}


def synthesize_rollups(path: Path, host: str, since: float, until: float) -> None:
    """Write 1m and 1h rollup rows for [since, until) for every GPU of ``host`` (29 days before the raw)."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT g.id FROM gpus g JOIN hosts h ON h.id = g.host_id WHERE h.name = ?", (host,))]
        conn.execute("BEGIN")
        for table, size in (("samples_1m", 60), ("samples_1h", 3600)):
            n = 60 if size == 60 else 3600
            for gid in ids:
                conn.execute(
                    f"""WITH RECURSIVE b(t) AS (SELECT CAST(? AS INTEGER) UNION ALL
                           SELECT t + ? FROM b WHERE t + ? < ?)
                        INSERT OR REPLACE INTO {table}
                        SELECT ?, t, ?, 0, (t / ?) % 100, 100, 9e9, 9e9, 9.1e9, 40, 55, 70, 100, 300, 650
                        FROM b""", (int(since), size, size, int(until), gid, n, size))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('raw_from', ?)", (until,))
        conn.execute("COMMIT")


async def _latest_gpus(store: Store, host: str) -> list[Any]:
    """The host's last stored GPUs (store.latest answers a snapshot per host), in timed's list shape."""
    last = (await store.latest(host)).get(host)
    return list(last.gpus) if last else []


async def timed(label: str, fn: object, runs: int = 15) -> float:
    times, points, res = [], 0, ""
    for _ in range(runs):
        start = time.perf_counter()
        series = await fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
        points = sum(len(getattr(s, "points", ())) for s in series)
        res = f"{series[0].resolution}/{series[0].step}" if series and hasattr(series[0], "step") else "-"
    med = statistics.median(times) * 1000
    print(f"  {label:<34} {med:8.1f} ms median  (min {min(times) * 1000:.1f}, {len(series)} GPUs, "
          f"{points} points, {res})")
    return med


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--day", action="store_true", help="also ingest a full host-day (size per host-day)")
    ap.add_argument("--keep", help="directory to keep the databases in (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="store-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
          f"db in {work}")
    # a queue that never sheds: the rate counts what was stored (the default byte bound sheds past ~8,000
    # queued 8-GPU snapshots, and a shed snapshot would count as ingested)
    tuning = Tuning(queue_max=10_000_000, queue_max_bytes=1 << 40)
    try:
        # 1. ingest rate
        t0 = 1_700_000_000.0
        frames = build_snapshots(args.hosts, args.seconds, t0)
        samples = sum(len(s.gpus) for _, s in frames)
        cfg = StorageConfig(path=str(work / "ingest.db"))
        store = await Store.open(cfg, tuning=tuning)
        elapsed = await ingest(store, frames)
        replay = await ingest(store, frames[: len(frames) // 4])
        if store.shed or store.dropped:
            print(f"the store shed {store.shed} and dropped {store.dropped} snapshots: no rate to report")
            await store.close()
            return 1
        floor = baseline_executemany(work / "baseline.db", frames)
        maint_start = time.perf_counter()
        await store.run_maintenance(t0 + args.seconds + 60)
        maint = time.perf_counter() - maint_start
        await store.close()
        print(f"ingest: {samples} GPU samples ({args.hosts} hosts x 8 GPUs x {args.seconds} s, 2 processes "
              f"each) in {elapsed:.2f} s = {samples / elapsed:,.0f} samples/s "
              f"({len(frames) / elapsed:,.0f} snapshots/s)")
        ratio = samples / elapsed / floor
        print(f"  baseline, plain executemany of the same sample rows (same schema, pragmas, batches): "
              f"{floor:,.0f} samples/s; the store does {ratio:.2f}x of it")
        print(f"  replay of a quarter (all duplicates): {len(frames) // 4 * 8 / replay:,.0f} samples/s; "
              f"maintenance (rollups of {samples} rows): {maint:.2f} s")
        del frames

        # 2. host-day
        day_cfg = StorageConfig(path=str(work / "hostday.db"))
        store = await Store.open(day_cfg, tuning=tuning)
        day_seconds = int(DAY) if args.day else 3600
        now = t0 + day_seconds
        start = time.perf_counter()
        for hour in range(0, day_seconds, 3600):
            await ingest(store, build_snapshots(1, min(3600, day_seconds - hour), t0 + hour))
        day_elapsed = time.perf_counter() - start
        await store.run_maintenance(now + 60)
        await store.checkpoint()
        await store.close()
        path = day_cfg.resolved_path()
        size = path.stat().st_size
        scale = DAY / day_seconds
        print(f"host-day: {day_seconds * 8} samples ingested in {day_elapsed:.1f} s (incl. building frames); "
              f"file {size / 1e6:.1f} MB for {day_seconds / 3600:.0f} h"
              + ("" if args.day else f" -> about {size * scale / 1e6:.0f} MB per host-day"))
        sizes = table_sizes(path)
        for name, nbytes in list(sizes.items())[:8]:
            print(f"  {name:<28} {nbytes / 1e6:8.2f} MB")
        per_day_rollups = (sizes.get("samples_1m", 0) + sizes.get("samples_1h", 0)) * scale
        print(f"  kept after raw retention: ~{per_day_rollups / 1e6:.2f} MB of rollups per host-day "
              f"(1m for 30 days, 1h for a year)")

        # 3. 30-day history for one host of 8 GPUs
        synthesize_rollups(path, "host000", now - 30 * DAY, t0)
        store = await Store.open(day_cfg, readonly=True)
        print("gpu_history, host of 8 GPUs:")
        month = await timed("30 days, max_points=500", lambda: store.gpu_history(
            "host000", since=now - 30 * DAY, until=now))
        await timed("30 days, max_points=800", lambda: store.gpu_history(
            "host000", since=now - 30 * DAY, until=now, max_points=800))
        await timed("1 day (or what was ingested)", lambda: store.gpu_history(
            "host000", since=now - DAY, until=now))
        await timed("1 hour", lambda: store.gpu_history("host000", since=now - 3600, until=now))
        await timed("5 minutes (raw)", lambda: store.gpu_history("host000", since=now - 300, until=now))
        await timed("latest()", lambda: _latest_gpus(store, "host000"))
        await store.close()
        met = {"ingest >= 0.8x plain executemany": ratio >= 0.8,
               "ingest >= 50,000 samples/s": samples / elapsed >= 50_000,
               "30-day history < 200 ms": month < 200}
        print("targets: " + "; ".join(f"{name}: {'OK' if ok else 'MISSED'}" for name, ok in met.items()))
        return 0 if all(met.values()) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
