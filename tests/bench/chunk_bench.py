"""Raw history in chunks against one row per GPU-sample, in one process (run by hand; issue 34's goals).

    .venv/bin/python -m tests.bench.chunk_bench [--hosts 100] [--seconds 600] [--data noisy|sim]

The same GPU samples (``--hosts`` hosts x 8 GPUs at 1 Hz for ``--seconds`` s; no processes, so only the
raw-sample path is measured: spans and GPU-hours cost the same either way) go
1. "before": into the old one-row-per-sample table with plain executemany in batches of 5,000 (the
   writer's batches), then the old 1-minute rollup SQL over them: the floor today's writer cannot beat;
2. "after": through the Store (its writer, the head, compaction into chunks, maintenance's rollups from
   chunks), then a clean stop.
Reported: bytes on disk per GPU-sample (file after a TRUNCATE checkpoint / clean stop; no WAL left), CPU
per GPU-sample (process time, all threads), one hour of raw samples of one GPU, and 30-day history of one
host (29 days of rollups synthesized before the raw part, as tests/bench/store_bench.py does).
``--data noisy``: readings with independent noise every second (power to the milliwatt, util, timestamps
jittered by 0.5 ms): close to the worst a real fleet sends; ``sim``: the simulated fleet's frames
(gpufleet.collector.simfleet: constant readings, timestamps to the microsecond), as `collector run` against
the simulator stores them (issue 34's 62.9 bytes). Exits 1 when a goal is missed: <= 8 bytes per sample,
CPU <= a quarter of before, 30-day history < 50 ms, an hour of one GPU < 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
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
from gpufleet.collector.store import schema
from gpufleet.collector.store._db import setup_writer
from gpufleet.collector.store.store import Store, Tuning

from tests.bench.store_bench import synthesize_rollups

GIB = 1 << 30
DAY = 86400.0
OLD_INSERT = ("INSERT OR IGNORE INTO samples (gpu_id, ts, util, util_mem, mem_used, temp, power, clock_sm, "
              "clock_mem, fan, ecc_corrected, ecc_uncorrected, throttle, error) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
OLD_ROLLUP = """
INSERT OR REPLACE INTO samples_1m (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
SELECT gpu_id, CAST(ts / 60 AS INTEGER) * 60 AS b, count(*),
       min(util), avg(util), max(util), min(mem_used), avg(mem_used), max(mem_used),
       min(temp), avg(temp), max(temp), min(power), avg(power), max(power)
FROM samples WHERE ts >= ? AND ts < ? GROUP BY gpu_id, b
"""


def readings(hosts: int, seconds: int, t0: float, noisy: bool, seed: int = 34) -> list[list[tuple[Any, ...]]]:
    """Per host-second, the 8 GPUs' (index, ts, util, util_mem, mem_used, temp, power, clock_sm, throttle)."""
    rnd = random.Random(seed)
    state = [{"busy": rnd.random() < 0.7, "temp": rnd.randint(35, 70), "mem": rnd.randint(10, 70) * GIB}
             for _ in range(hosts * 8)]
    out = []
    for s in range(seconds):
        for h in range(hosts):
            if noisy:
                ts = t0 + s + rnd.gauss(0.0, 0.0005)
            else:
                ts = float(f"{t0 + s + 0.000123 * (h % 7):.6f}")
            rows = []
            for i in range(8):
                st = state[h * 8 + i]
                if not noisy:
                    rows.append((i, ts, 95, 40, (20 + i) << 30, 60 + i, 450.5, 1980, None))
                    continue
                if rnd.random() < 0.3:
                    st["temp"] = max(30, min(85, st["temp"] + rnd.choice((-1, 1))))
                if st["busy"]:
                    util = max(0, min(100, int(rnd.gauss(93, 5))))
                    rows.append((i, ts, util, util * 2 // 5, st["mem"], st["temp"],
                                 rnd.randint(480000, 620000) / 1000, 1980 if rnd.random() < 0.9 else 1755,
                                 ["sw_power_cap"] if rnd.random() < 0.05 else None))
                else:
                    rows.append((i, ts, 0, 0, 512 << 20, st["temp"], rnd.randint(68000, 72000) / 1000, 345,
                                 ["gpu_idle"]))
            out.append(rows)
    return out


def snapshots(data: list[list[tuple[Any, ...]]], hosts: int) -> list[tuple[str, sample.Snapshot]]:
    out = []
    for k, rows in enumerate(data):
        h = k % hosts
        gpus = [sample.GpuSample(index=i, uuid=f"GPU-{h:04d}-{i}", name="NVIDIA H100", util_gpu=u,
                                 util_mem=um, memory_total=80 * GIB, memory_used=m, temperature=t,
                                 power_draw=p, power_limit=700.0, clock_sm=c, clock_mem=2619,
                                 ecc_corrected=0, ecc_uncorrected=0, throttle_reasons=thr)
                for i, _ts, u, um, m, t, p, c, thr in rows]
        snap = sample.Snapshot(proto=wire.PROTO_VERSION, ts=rows[0][1], seq=k, gpus=gpus)
        out.append((f"host{h:04d}", snap))
    return out


def before(path: Path, data: list[list[tuple[Any, ...]]], hosts: int, t0: float,
           seconds: int) -> tuple[float, int]:
    """CPU seconds and file bytes of the old table: executemany in batches of 5,000, then the rollup."""
    conn = sqlite3.connect(path, isolation_level=None)
    setup_writer(conn)
    conn.execute("BEGIN")
    for step in (s for v in schema.MIGRATIONS[:6] for s in v):
        assert isinstance(step, str)
        conn.execute(step)
    conn.execute("COMMIT")
    start = time.process_time()
    rows: list[tuple[Any, ...]] = []
    for k, snap_rows in enumerate(data):
        base = (k % hosts) * 8 + 1
        rows += ((base + i, ts, u, um, m, t, p, c, 2619, None, 0, 0, ",".join(thr) if thr else None, None)
                 for i, ts, u, um, m, t, p, c, thr in snap_rows)
        if len(rows) >= 5000:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(OLD_INSERT, rows)
            conn.execute("COMMIT")
            rows.clear()
    if rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(OLD_INSERT, rows)
        conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(OLD_ROLLUP, (t0 - 60, t0 + seconds + 60))
    conn.execute("COMMIT")
    cpu = time.process_time() - start
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return cpu, path.stat().st_size


def old_hour_of_one_gpu(path: Path, until: float) -> float:
    conn = sqlite3.connect(path)
    times = []
    for _ in range(15):
        start = time.perf_counter()
        rows = conn.execute("SELECT ts, util, mem_used, temp, power FROM samples WHERE gpu_id = 1 "
                            "AND ts >= ? AND ts <= ? ORDER BY ts", (until - 3600, until)).fetchall()
        times.append(time.perf_counter() - start)
    conn.close()
    assert rows
    return statistics.median(times) * 1000


async def after(path: Path, frames: list[tuple[str, sample.Snapshot]], end: float) -> tuple[float, int]:
    store = await Store.open(StorageConfig(path=str(path)),
                             tuning=Tuning(queue_max=10_000_000, queue_max_bytes=1 << 40))
    start = time.process_time()
    for i in range(0, len(frames), 2000):
        for host, snap in frames[i:i + 2000]:
            store.submit_snapshot(host, snap, snap.ts)
        await asyncio.sleep(0)
        while store.queue_depth > 8000:
            await asyncio.sleep(0.01)
        if (i // 2000) % 20 == 0:
            await store.run_maintenance(frames[i][1].ts)
    await store.flush()
    await store.run_maintenance(end + 60)
    await store.close()
    cpu = time.process_time() - start
    assert not store.shed and not store.dropped
    return cpu, path.stat().st_size


async def timed(fn: Any, runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = await fn()
        times.append(time.perf_counter() - start)
    assert out
    return statistics.median(times) * 1000


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--data", choices=("noisy", "sim"), default="noisy")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chunk-bench-"))
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
          f"load {load:.2f}; {args.hosts} hosts x 8 GPUs x {args.seconds} s, data {args.data}")
    try:
        t0 = float(int(time.time() // 3600) * 3600 - 2 * 3600)
        data = readings(args.hosts, args.seconds, t0, args.data == "noisy")
        n = sum(len(r) for r in data)
        old_cpu, old_bytes = before(work / "before.db", data, args.hosts, t0, args.seconds)
        frames = snapshots(data, args.hosts)
        del data
        new_cpu, new_bytes = await after(work / "after.db", frames, t0 + args.seconds)
        del frames
        print(f"{'':34}{'before':>14}{'after':>14}")
        print(f"{'bytes per GPU-sample':34}{old_bytes / n:14.2f}{new_bytes / n:14.2f}")
        print(f"{'CPU us per GPU-sample':34}{old_cpu / n * 1e6:14.2f}{new_cpu / n * 1e6:14.2f}")
        until = t0 + args.seconds
        old_hour = old_hour_of_one_gpu(work / "before.db", until)
        store = await Store.open(StorageConfig(path=str(work / "after.db")), readonly=True)
        new_hour = await timed(lambda: store.raw_history("host0000", gpu=0, since=until - 3600, until=until))
        hist_hour = await timed(lambda: store.gpu_history("host0000", gpu=0, since=until - 3600, until=until,
                                                          max_points=3600))
        await store.close()
        print(f"{'hour of raw, one GPU (ms)':34}{old_hour:14.2f}{new_hour:14.2f}  (gpu_history raw: "
              f"{hist_hour:.2f})")
        synthesize_rollups(work / "after.db", "host0000", until - 30 * DAY, t0)
        store = await Store.open(StorageConfig(path=str(work / "after.db")), readonly=True)
        month = await timed(lambda: store.gpu_history("host0000", since=until - 30 * DAY, until=until))
        await store.close()
        print(f"{'30-day history --host (ms)':34}{'':>14}{month:14.2f}")
        met = {"<= 8 bytes/sample": new_bytes / n <= 8, "CPU <= 1/4 before": new_cpu <= old_cpu / 4,
               "30-day history < 50 ms": month < 50, "hour of one GPU < 20 ms": new_hour < 20}
        print("goals: " + "; ".join(f"{k}: {'OK' if ok else 'MISSED'}" for k, ok in met.items()))
        return 0 if all(met.values()) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
