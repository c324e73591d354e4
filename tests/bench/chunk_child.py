"""One side of tests/bench/chunk_bench.py, in its own process: the store this process imports (this tree's,
or an older commit's through tests/oldtree.py) fed a fleet's frames, measured. Prints one JSON line.

    python -m tests.bench.chunk_child ingest --hosts 100 --seconds 600 --data noisy --procs 1 [--paced]
    python -m tests.bench.chunk_child reads --data noisy

Only what both stores have is used (Store.open/submit_snapshot/flush/run_maintenance/gpu_history/close,
FleetFacts, StoreOps), so the same code measures before and after.

- ``ingest``: ``--hosts`` hosts x 8 GPUs at 1 Hz for ``--seconds`` s through ``Store.submit_snapshot`` (the
  whole store path: admission at put, the writer's batches, spans and GPU-hours of ``--procs`` processes per
  busy GPU, the samples, ``run_maintenance`` every 60 s as the daemon calls it: rollups, retention,
  checkpoint), then a flush and a clean stop. ``--paced``: a second of frames every second of wall time, as
  a fleet sends them (the daemon's cadence: 0.5 s batches, the head's 2 s flushes); else as fast as the store
  takes them, with simulated time. Building the frames and classifying them (the rules' work, shared with the
  store through FleetFacts) is timed on its own thread clock and taken out of the CPU figure.
  Reports: CPU seconds of the store (process time of every thread, less the frames' building), bytes of the
  file + WAL after a TRUNCATE checkpoint, GPU-samples.
- ``reads``: one host of 8 GPUs, an hour of samples (fast), maintenance; then 29 days of rollups written
  before them (what retention leaves behind) and the read times: an hour of raw samples of one GPU
  (gpu_history at 3,600 points, and Store.raw_history where the store has it), the ``history`` op for the
  host over 30 days (what ``gpufleet history --host`` asks), and gpu_history alone over 30 days.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store, Tuning

from tests.bench.store_bench import synthesize_rollups

if os.environ.get("CHUNK_BENCH_FLOOR"):  # tests/bench/chunk_bench.py's floor: the store without its samples
    from gpufleet.collector.store import head

    head.Head.take = lambda self, samples, gpu_last: None  # type: ignore[method-assign]

GIB = 1 << 30
DAY = 86400.0
GPUS = 8
#: The daemon's maintenance period (collector/service/daemon.py MAINTENANCE_INTERVAL).
MAINTENANCE_EVERY = 60


class Fleet:
    """Per host, its GPUs' state; :meth:`second` builds every host's snapshot of one second.

    ``noisy``: readings as busy GPUs give them: util around 93 % with noise, power to the milliwatt moving
    every second, temperature drifting, clocks dipping, throttle reasons now and then; 30 % of GPUs idle;
    each host samples at its own phase within the second with ~0.5 ms of jitter (the agent's timer).
    ``sim``: the simulated fleet's frames (collector/simfleet): constant readings, times to the microsecond.
    """

    def __init__(self, hosts: int, noisy: bool, procs: int, seed: int = 34) -> None:
        self.hosts = hosts
        self.noisy = noisy
        self.procs = procs
        self.rnd = random.Random(seed)
        rnd = self.rnd
        self.phase = [rnd.random() * 0.9 for _ in range(hosts)]
        self.state = [{"busy": rnd.random() < 0.7, "temp": rnd.randint(35, 70),
                       "mem": rnd.randint(10, 70) * GIB} for _ in range(hosts * GPUS)]
        self.procs_of = [[sample.ProcessSample(pid=10_000 + 100 * i + j,
                                               user="alice" if j == 0 else f"user{j}",
                                               uid=1000 + j, gpu_memory=(20 if j == 0 else 1) << 30,
                                               sm_util=90 if j == 0 else 5, start_time=1.7e9 + j, state="R",
                                               command=f"python train.py --rank {j} --config cfg.yaml")
                          for j in range(procs)] for i in range(GPUS)]

    def second(self, base: float, seq: int) -> list[tuple[str, sample.Snapshot]]:
        rnd = self.rnd
        out = []
        for h in range(self.hosts):
            if self.noisy:
                ts = base + self.phase[h] + rnd.gauss(0.0, 0.0005)
            else:
                ts = float(f"{base + self.phase[h]:.6f}")
            gpus = []
            for i in range(GPUS):
                st = self.state[h * GPUS + i]
                procs = self.procs_of[i] if st["busy"] or not self.noisy else []
                if not self.noisy:
                    gpus.append(sample.GpuSample(
                        index=i, uuid=f"GPU-{h:04d}-{i}", name="NVIDIA H100", util_gpu=95, util_mem=40,
                        memory_total=80 * GIB, memory_used=(20 + i) << 30, temperature=60 + i,
                        power_draw=450.5,
                        power_limit=700.0, clock_sm=1980, clock_mem=2619, ecc_corrected=0, ecc_uncorrected=0,
                        throttle_reasons=[], processes=procs))
                    continue
                if rnd.random() < 0.3:
                    st["temp"] = max(30, min(85, st["temp"] + rnd.choice((-1, 1))))
                if st["busy"]:
                    util = max(0, min(100, int(rnd.gauss(93, 5))))
                    gpus.append(sample.GpuSample(
                        index=i, uuid=f"GPU-{h:04d}-{i}", name="NVIDIA H100", util_gpu=util,
                        util_mem=util * 2 // 5, memory_total=80 * GIB, memory_used=st["mem"],
                        temperature=st["temp"], power_draw=rnd.randint(480000, 620000) / 1000,
                        power_limit=700.0, clock_sm=1980 if rnd.random() < 0.9 else 1755, clock_mem=2619,
                        ecc_corrected=0, ecc_uncorrected=0,
                        throttle_reasons=["sw_power_cap"] if rnd.random() < 0.05 else [], processes=procs))
                else:
                    gpus.append(sample.GpuSample(
                        index=i, uuid=f"GPU-{h:04d}-{i}", name="NVIDIA H100", util_gpu=0, util_mem=0,
                        memory_total=80 * GIB, memory_used=512 << 20, temperature=st["temp"],
                        power_draw=rnd.randint(68000, 72000) / 1000, power_limit=700.0, clock_sm=345,
                        clock_mem=2619, ecc_corrected=0, ecc_uncorrected=0, throttle_reasons=["gpu_idle"],
                        processes=procs))
            out.append((f"host{h:04d}", sample.Snapshot(proto=wire.PROTO_VERSION, ts=ts, seq=seq, gpus=gpus)))
        return out


def _disk(path: Path) -> int:
    """File + WAL after a TRUNCATE checkpoint (the store is closed)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


async def ingest(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="chunk-child-"))
    path = work / "fleet.db"
    fleet = Fleet(args.hosts, args.data == "noisy", args.procs)
    facts = FleetFacts(DEFAULT_THRESHOLDS)
    store = await Store.open(StorageConfig(path=str(path)), tuning=Tuning.for_fleet(args.hosts)
                             if args.paced else Tuning(queue_max=10_000_000, queue_max_bytes=1 << 40))
    store.facts = facts
    building = 0.0
    samples = 0
    if args.paced:
        start = time.time() + 1.0
        t0 = float(int(start))
    else:
        t0 = float(int(time.time()) - args.seconds - 120)
    maintained = t0
    upkeep: asyncio.Task[None] | None = None
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for s in range(args.seconds):
        b0 = time.thread_time()
        frames = fleet.second(t0 + s, s)
        for host, snap in frames:
            facts.of(host, snap)  # the rules' classification, shared with the store (not its cost)
        building += time.thread_time() - b0
        if args.paced:
            delay = t0 + s + 1.0 - time.time()  # the frames of second s arrive during it
            if delay > 0:
                await asyncio.sleep(delay)
        for host, snap in frames:
            store.submit_snapshot(host, snap, snap.ts)
            samples += len(snap.gpus)
        if not args.paced:
            await asyncio.sleep(0)
            while store.queue_depth > 4 * args.hosts:
                await asyncio.sleep(0.005)
        now = t0 + s + 1.0
        if now - maintained >= MAINTENANCE_EVERY:
            maintained = now
            if upkeep is not None:
                await upkeep
            # the daemon's maintenance task runs beside ingest
            upkeep = asyncio.create_task(store.run_maintenance(time.time() if args.paced else now))
    if upkeep is not None:
        await upkeep
    await store.flush()
    await store.close()
    cpu = time.process_time() - cpu0 - building
    wall = time.perf_counter() - wall0
    if store.shed or store.dropped or store.refused:
        raise SystemExit(f"the store shed {store.shed}, dropped {store.dropped}, refused {store.refused}")
    size = _disk(path)
    tables = {}
    conn = sqlite3.connect(path)
    try:
        for name, nbytes in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name "
                                         "ORDER BY 2 DESC"):
            tables[name] = int(nbytes)
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0]) * 4096
    finally:
        conn.close()
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    return {"samples": samples, "cpu": cpu, "building": building, "wall": wall, "bytes": size,
            "free_bytes": free, "tables": tables}


async def _median_ms(fn: Any, runs: int = 15) -> float:
    times = []
    out = None
    for _ in range(runs):
        start = time.perf_counter()
        out = await fn()
        times.append(time.perf_counter() - start)
    assert out
    return statistics.median(times) * 1000


async def reads(args: argparse.Namespace) -> dict[str, Any]:
    from gpufleet.collector.faces.api.ops import StoreOps, dispatch

    work = Path(tempfile.mkdtemp(prefix="chunk-reads-"))
    path = work / "reads.db"
    fleet = Fleet(1, args.data == "noisy", args.procs)
    store = await Store.open(StorageConfig(path=str(path)), tuning=Tuning(queue_max=10_000_000,
                                                                          queue_max_bytes=1 << 40))
    until = float(int(time.time()) - 300)
    t0 = until - 3600
    for s in range(3600):
        for host, snap in fleet.second(t0 + s, s):
            store.submit_snapshot(host, snap, snap.ts)
        if s % 600 == 0:
            await store.flush()
    await store.flush()
    await store.run_maintenance(until + 120)
    await store.close()
    synthesize_rollups(path, "host0000", until - 30 * DAY, t0)
    out: dict[str, Any] = {}
    store = await Store.open(StorageConfig(path=str(path)), readonly=True)
    try:
        out["hour_gpu_history"] = await _median_ms(lambda: store.gpu_history(
            "host0000", gpu=0, since=t0, until=until, max_points=3600))
        series = await store.gpu_history("host0000", gpu=0, since=t0, until=until, max_points=3600)
        assert series[0].resolution == "raw" and len(series[0].points) >= 3599, series[0].resolution
        if hasattr(store, "raw_history"):
            out["hour_raw_history"] = await _median_ms(lambda: store.raw_history(
                "host0000", gpu=0, since=t0, until=until))
        out["month_gpu_history"] = await _median_ms(lambda: store.gpu_history(
            "host0000", since=until - 30 * DAY, until=until))
        ops = StoreOps(store).table()

        async def op() -> Any:
            response = await dispatch(ops, {"op": "history", "args": {
                "host": "host0000", "since": until - 30 * DAY, "until": until}})
            assert response["ok"], response
            return response
        out["month_history_op"] = await _median_ms(op)
    finally:
        await store.close()
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("ingest", "reads"))
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--data", choices=("noisy", "sim"), default="noisy")
    ap.add_argument("--procs", type=int, default=1, help="processes on each busy GPU")
    ap.add_argument("--paced", action="store_true", help="a second of frames per second of wall time")
    args = ap.parse_args()
    result = asyncio.run(ingest(args) if args.what == "ingest" else reads(args))
    result["pid"] = os.getpid()
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
