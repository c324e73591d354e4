"""The floor under the collector's cost per host-sample, and what the store's writer spends (run by hand).

    .venv/bin/python -m tests.bench.ingest_floor [--hosts 300] [--seconds 20]

1. Floor: ``json.loads`` of one realistic frame (8 GPUs x 8 processes), then the same plus a plain
   ``executemany`` of its rows on the store's schema and pragmas, in transactions of 150 frames (300 hosts,
   the writer's 0.5 s batches): 8 sample rows, and 8 sample rows + 64 process-span upserts (72 rows).
2. The writer (IngestState + write_rows, its thread's whole work) on the same frames and batches, with
   running totals written every batch (``accrue_interval`` 0, the old behaviour), every 10 s and every 60 s
   (the default since issue 33).

Issue 13's target is 0.15 ms CPU per host-sample for the whole collector; this prints how much of that the
least possible parse and write already take on this machine. Exits 0: it measures, it sets no target.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.store._db import setup_writer
from gpufleet.collector.store.ingest import SPAN_UPSERT, FrameItem, IngestState
from gpufleet.collector.store.writer import _write_batch
from gpufleet.collector.transport import wirefast

from tests.bench import rowtable

BATCH = 150


def _db() -> sqlite3.Connection:
    path = os.path.join(tempfile.mkdtemp(prefix="gpufleet-floor-"), "f.db")
    conn = sqlite3.connect(path, isolation_level=None)
    setup_writer(conn)
    rowtable.create(conn)
    return conn


def floor_ms(lines: list[bytes], rows: str) -> float:
    """CPU ms per frame: json.loads, and with ``rows`` "samples" or "all" a plain executemany of them."""
    conn = _db()
    conn.execute("INSERT INTO hosts (name) VALUES ('h')")
    for i in range(8):
        conn.execute("INSERT INTO gpus (id, uuid, host_id, idx, first_seen, last_seen) "
                     "VALUES (?, ?, 1, ?, 0, 0)", (i + 1, f"u{i}", i))
    start = time.process_time()
    for b in range(0, len(lines), BATCH):
        samples: list[tuple[Any, ...]] = []
        spans: list[tuple[Any, ...]] = []
        for s, line in enumerate(lines[b:b + BATCH], start=b):
            obj = json.loads(line)
            if rows == "none":
                continue
            for i, g in enumerate(obj["gpus"]):
                samples.append((i + 1, 1e9 + s, g["util_gpu"], g["util_mem"], g["memory_used"],
                                g["temperature"], g["power_draw"], g["clock_sm"], g["clock_mem"], None, 0, 0,
                                None, None))
                if rows == "all":
                    spans.extend((i + 1, p["pid"], p["start_time"], 1, 1, i, p["user"], p["uid"],
                                  p["command"], "compute", None, None, None, 1, "R", 1e9 + s, 1e9 + s,
                                  p["gpu_memory"], p["gpu_memory"], p["sm_util"], p["sm_util"], 1)
                                 for p in g["processes"])
        if rows != "none":
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(rowtable.INSERT, samples)
            conn.executemany(SPAN_UPSERT, spans)
            conn.execute("COMMIT")
    return (time.process_time() - start) * 1000 / len(lines)


def writer_ms(frames: list[sample.Snapshot], hosts: int, seconds: int, interval: float) -> float:
    """CPU ms per host-sample of the writer's own work (convert, account, write, commit)."""
    conn = _db()
    now = [0.0]
    state = IngestState(DEFAULT_THRESHOLDS, accrue_interval=interval, clock=lambda: now[0])
    items = [FrameItem("snapshot", f"h{h}", sample.Snapshot(proto=wire.PROTO_VERSION, ts=1e9 + s, seq=s,
                                                            gpus=frames[h].gpus), 1e9 + s)
             for s in range(seconds) for h in range(hosts)]
    start = time.process_time()
    for k in range(0, len(items), BATCH):
        now[0] = k / hosts  # one second of agent time per round of the fleet
        _write_batch(conn, state, items[k:k + BATCH], [])
    _write_batch(conn, state, [], [], totals=True)
    return (time.process_time() - start) * 1000 / len(items)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=20)
    args = ap.parse_args()
    gens = [FrameGenerator(f"h{i}", 8, procs=8) for i in range(args.hosts)]
    lines = [gens[0].snapshot(s) for s in range(args.hosts * 10)]
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}; frames of 8 GPUs x 8 "
          f"processes, {len(lines[0])} bytes; transactions of {BATCH} frames")
    for label, rows in (("json.loads", "none"), ("json.loads + executemany of 8 sample rows", "samples"),
                        ("json.loads + executemany of 72 rows", "all")):
        print(f"  floor: {label:<44} {floor_ms(lines, rows):6.3f} ms CPU per host-sample")
    frames = [wirefast.decode(g.snapshot(0)) for g in gens]
    for interval in (0.0, 10.0, 60.0):
        assert all(isinstance(f, sample.Snapshot) for f in frames)
        ms = writer_ms(frames, args.hosts, args.seconds, interval)  # type: ignore[arg-type]
        every = "batch" if not interval else f"{interval:g} s"
        print(f"  {'store writer, totals every ' + every:<51} {ms:6.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
