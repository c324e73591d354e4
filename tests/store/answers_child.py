"""The store of whichever gpufleet this process imports, fed a scripted fleet, and every answer it gives.

    python -m tests.store.answers_child ingest DB T0        # frames and maintenance into DB
    python -m tests.store.answers_child answer DB T0 OUT    # every answer, as JSON into OUT
    python -m tests.store.answers_child later DB T0         # an hour later: hour rollups, raw retention
    python -m tests.store.answers_child open DB T0          # open for writing (migrate), close

tests/store/test_same_answers.py runs it with this tree and with main before chunks (tests/oldtree.py) and
compares the outputs; tests/store/test_migrate_chunks.py answers from a file written by the old code, then
from the same file once this code has converted it. Only what both versions have is used.

The fleet (three hosts, three hours and a bit at 1 Hz from T0), written to make the raw path work hard:
- readings that move every second (power to the milliwatt, and on host b powers that are no whole number
  of milliwatts and huge memory values), nulls (util, power, temperature now and then; one GPU that never
  reports its temperature), throttle reasons as text, a GPU that is lost for ten minutes (its error and no
  readings);
- processes with and without a start time, a Slurm job, a helper that ends (a job record);
- a GPU that moves to another slot half-way (placements), a host silent for 20 minutes (a gap) whose last
  ten minutes of frames arrive ten minutes late (minutes already rolled up get samples), a clock step back
  of 30 s on host b (the same times again, other readings), frames sent twice, and ten minutes of host c
  sent again 40 minutes later (stored already: nothing changes);
- raw retention of two hours, so maintenance deletes raw history and history reads switch resolution.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpufleet.agent import wire
from gpufleet.cli.render_history import history_csv
from gpufleet.collector.faces.api.ops import StoreOps, dispatch
from gpufleet.collector.fleet.jobs import JobTracker
from gpufleet.collector.model import sample
from gpufleet.collector.model.codec import plain
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store

GIB = 1 << 30
SECONDS = 3 * 3600 + 600
HOSTS = {"a": 4, "b": 2, "c": 8}
RAW_RETENTION = 2 * 3600.0
SILENT = (5000, 6200)  # host a sends nothing in these seconds ...
LATE_AT, LATE = 6800, (5600, 6200)  # ... then the frames of these, late (an agent that kept them)
STEP_AT = 7000  # host b's clock steps back 30 s here
LOST = (2000, 2600)  # host c's GPU 3 is lost
REPLAY_AT, REPLAY = 9000, (6600, 7200)  # host c sends these seconds again at REPLAY_AT (already stored)


def config(db: str) -> StorageConfig:
    return StorageConfig(path=db, raw_retention=RAW_RETENTION)


def _gpu(host: str, i: int, s: int, rnd: random.Random) -> sample.GpuSample:
    uuid = f"GPU-{host}-{i}"
    if host == "a" and s >= SECONDS // 2 and i in (2, 3):
        uuid = f"GPU-{host}-{5 - i}"  # GPUs 2 and 3 swap slots half-way
    if host == "c" and i == 3 and LOST[0] <= s < LOST[1]:
        return sample.GpuSample(index=i, uuid=uuid, error="GPU is lost")
    procs = []
    if i < 2:
        procs.append(sample.ProcessSample(pid=100 + i, user="alice", uid=1000, gpu_memory=(10 + i) * GIB,
                                          sm_util=rnd.randint(50, 99), command="python train.py",
                                          start_time=1.7e9, state="R", job="4242" if host == "c" else None))
    if i == 0 and s < 3600:
        procs.append(sample.ProcessSample(pid=300, user="bob", uid=1001, gpu_memory=GIB, sm_util=None,
                                          command="jupyter-lab", start_time=None, state="S"))
    busy = bool(procs)
    util = rnd.randint(80, 100) if busy else rnd.choice((0, 0, 0, 1))
    if rnd.random() < 0.02:
        util = None
    if host == "b":
        power: float | None = round(rnd.uniform(100, 400), 9)  # no whole number of milliwatts
        memory = (1 << 50) + rnd.randint(0, 1 << 40)
    else:
        power = rnd.randint(60_000, 650_000) / 1000
        memory = (10 + i) * GIB + rnd.randint(0, 255) * 4096
    if rnd.random() < 0.03:
        power = None
    temp = None if (host == "b" and i == 1) or rnd.random() < 0.01 else 40 + (s // 97 + i) % 30
    reasons = ["sw_power_cap"] if rnd.random() < 0.1 else (["gpu_idle"] if not busy else [])
    return sample.GpuSample(index=i, uuid=uuid, name="NVIDIA H100", util_gpu=util,
                            util_mem=None if util is None else util // 3, memory_total=80 * GIB,
                            memory_used=memory, temperature=temp,
                            power_draw=power, power_limit=700.0, clock_sm=1980 if busy else 345,
                            clock_mem=2619,
                            ecc_corrected=0, ecc_uncorrected=0, throttle_reasons=reasons, processes=procs)


def frames(t0: float) -> Iterator[tuple[float, list[tuple[str, sample.Snapshot, float]]]]:
    """Per second of the collector's clock, the frames that arrive then: (host, snapshot, received)."""
    rnd = random.Random(34)
    kept: dict[tuple[str, int], sample.Snapshot] = {}
    for s in range(SECONDS):
        now = t0 + s
        batch = []
        for host, count in HOSTS.items():
            ts = now + {"a": 0.25, "b": 0.5 + rnd.random() * 0.001, "c": 0.0}[host]
            if host == "b" and s >= STEP_AT:
                ts -= 30.0
            snap = sample.Snapshot(proto=wire.PROTO_VERSION, ts=round(ts, 6), seq=s,
                                   gpus=[_gpu(host, i, s, rnd) for i in range(count)])
            if host == "a" and SILENT[0] <= s < SILENT[1]:
                if s >= LATE[0]:
                    kept[(host, s)] = snap
                continue
            batch.append((host, snap, now + 0.6))
            if host == "c" and REPLAY[0] <= s < REPLAY[1]:
                kept[(host, s)] = snap
            if s % 997 == 0:  # sent twice (a reconnect's replay of the last frame)
                batch.append((host, snap, now + 0.7))
        if s == LATE_AT:
            batch += [("a", kept.pop(("a", k)), now + 0.8) for k in range(*LATE)]
        if s == REPLAY_AT:
            batch += [("c", kept.pop(("c", k)), now + 0.8) for k in range(*REPLAY)]
        yield now, batch


async def ingest(db: str, t0: float) -> None:
    store = await Store.open(config(db))
    jobs = JobTracker(store.save_jobs)
    try:
        for now, batch in frames(t0):
            for host, snap, received in batch:
                store.submit_snapshot(host, snap, received)
                jobs.frame(host, snap, received)
            if int(now - t0) % 60 == 59:
                await store.flush()
                await store.run_maintenance(now + 1)
        end = t0 + SECONDS
        jobs.sweep(end + 3600)
        await jobs.drain()
        await store.flush()
        await store.run_maintenance(end + 120)  # every minute rolled up
    finally:
        await store.close()


async def later(db: str, t0: float) -> None:
    """An hour after the last frame: the last hour rolled up, raw history older than two hours deleted."""
    store = await Store.open(config(db))
    try:
        await store.run_maintenance(t0 + SECONDS + 3900)
    finally:
        await store.close()


async def answer(db: str, t0: float) -> dict[str, Any]:
    """Every answer the faces give from this file: history (raw, 1 m, 1 h; CSV and JSON), the web page's
    chart data, latest (status), processes, usage, events, the report and the job records."""
    from gpufleet.collector.faces.web import server as web

    end = t0 + SECONDS
    clock = end + 200 if meta(db, "h1_upto") < end else end + 4000
    store = await Store.open(config(db), readonly=True)
    out: dict[str, Any] = {}
    try:
        ops = StoreOps(store, clock=lambda: clock).table()

        async def op(name: str, **args: Any) -> Any:
            response = await dispatch(ops, {"op": name, "args": args})
            assert response["ok"], response
            return plain(response["result"])

        ranges = {"last 10 min": (end - 600, end), "the step": (t0 + STEP_AT - 120, t0 + STEP_AT + 60),
                  "2 h": (end - 7200, end), "replayed": (t0 + REPLAY[0] - 300, t0 + REPLAY[1] + 300),
                  "whole": (t0 - 60, end + 60), "first half hour": (t0, t0 + 1800),
                  "the gap": (t0 + SILENT[0] - 300, t0 + SILENT[1] + 300),
                  "late frames": (t0 + LATE[0] - 30, t0 + LATE[1] + 30), "a minute": (end - 1830, end - 1770)}
        for host in HOSTS:
            for label, (since, until) in ranges.items():
                for points in (5, 50, 500, 10_000):
                    key = f"history {host} {label} {points}"
                    result = await op("history", host=host, since=since, until=until, max_points=points)
                    out[key] = result
                    out[key + " csv"] = history_csv(result)
                result = await op("history", host=host, gpu=0, user="alice", since=since, until=until)
                out[f"history {host} {label} gpu 0 alice"] = result
        out["status"] = await op("status")
        out["hosts"] = await op("hosts")
        out["processes"] = await op("processes", since=t0 - 60, until=end + 60)
        out["usage"] = await op("usage", since=t0 - 60, until=end + 60, by_host=True)
        out["events"] = await op("events", since=t0 - 60, until=end + 60)
        out["jobs"] = await op("jobs", since=t0 - 60, until=clock)
        for fmt in ("text", "json", "markdown"):
            out[f"report {fmt}"] = await op("report", since=t0 - 60, until=end + 60, format=fmt)
        # the web page's chart data: its own handler, at the page's ranges, with the clock at ``clock``
        page: Any = web.WebServer.__new__(web.WebServer)
        page.source = SimpleNamespace(live=SimpleNamespace(hosts=dict.fromkeys(HOSTS)), store=store)
        real_time = web.time
        web.time = SimpleNamespace(time=lambda: clock)  # type: ignore[assignment]
        try:
            for host, count in HOSTS.items():
                for gpu in range(count):
                    for rng in web.RANGES:
                        req = web.Request("GET", "/api/history",
                                          {"host": host, "gpu": str(gpu), "range": rng})
                        out[f"page {host} {gpu} {rng}"] = json.loads(await page._history(req))
        finally:
            web.time = real_time
    finally:
        await store.close()
    return out


def meta(db: str, key: str) -> float:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    finally:
        conn.close()
    return float("-inf") if row is None or row[0] is None else float(row[0])


async def open_once(db: str) -> None:
    """What a collector's start does to the file first: open it for writing (and migrate it), then stop."""
    store = await Store.open(config(db))
    await store.close()


def main() -> int:
    what, db, t0 = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if what == "open":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        asyncio.run(open_once(db))
        return 0
    if what in ("ingest", "later"):
        asyncio.run((ingest if what == "ingest" else later)(db, t0))
        return 0
    result = asyncio.run(answer(db, t0))
    Path(sys.argv[4]).write_text(json.dumps(result, sort_keys=True, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
