"""Raw history in chunks against the store it replaced, side by side (run by hand; issue 34's goals).

    .venv/bin/python -m tests.bench.chunk_bench [--hosts 100] [--seconds 600] [--data noisy|sim]
                                                [--procs 1] [--fast] [--no-reads]

Before: the real store of main before chunks (one SQLite row per GPU-sample; tests/oldtree.py BEFORE_CHUNKS,
its code from ``git archive``). After: this tree's. Each runs in its own process (tests/bench/chunk_child.py),
both at once, over the same frames: ``--hosts`` hosts x 8 GPUs at 1 Hz for ``--seconds`` s, ``--procs``
processes on each busy GPU, through Store.submit_snapshot as the daemon feeds it (admission, the writer's
batches, spans and GPU-hours, samples, maintenance every minute: rollups, retention, checkpoint), paced in
real time (``--fast``: as fast as each store takes them). A third process runs this tree's store with the
samples left out (the head takes nothing): what the store spends on everything else, the floor under its CPU.
``--data noisy`` (default): readings that move every second (power to the milliwatt, util with noise, times
with 0.5 ms of jitter): about the worst a real fleet sends; ``sim``: the simulated fleet's frames.

Reported, before and after: bytes on disk per GPU-sample (file + WAL after a TRUNCATE checkpoint, after a
clean stop), store CPU per GPU-sample (process time of every thread, less the frames' building), and the
read times of an hour of raw samples of one GPU and of 30 days of one host's history (the ``history`` op
that ``gpufleet history --host`` asks; tests/bench/chunk_child.py ``reads``). The 1-minute load average
is printed before and after. Exits 1 when a goal is missed: <= 8 bytes per GPU-sample, CPU <= a quarter
of before, an hour of one GPU < 20 ms, 30-day history < 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import oldtree


def _child(tree: Path | None, args: list[str], floor: bool = False) -> subprocess.Popen[str]:
    env = oldtree.env(tree)
    if floor:
        env["CHUNK_BENCH_FLOOR"] = "1"
    return subprocess.Popen([sys.executable, "-m", "tests.bench.chunk_child", *args], cwd=oldtree.ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--data", choices=("noisy", "sim"), default="noisy")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--fast", action="store_true", help="not paced: each store as fast as it goes")
    ap.add_argument("--no-reads", action="store_true", help="skip the read times")
    args = ap.parse_args()
    old = oldtree.view(oldtree.BEFORE_CHUNKS)
    load0 = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs; "
          f"{args.hosts} hosts x 8 GPUs x {args.seconds} s at 1 Hz, {args.procs} process(es) per busy GPU, "
          f"data {args.data}, {'fast' if args.fast else 'paced'}; load {load0:.2f} at start", flush=True)
    common = ["ingest", "--hosts", str(args.hosts), "--seconds", str(args.seconds), "--data", args.data,
              "--procs", str(args.procs), *([] if args.fast else ["--paced"])]
    started = time.monotonic()
    procs = {"before": _child(old, common), "after": _child(None, common),
             "floor": _child(None, common, floor=True)}
    got = {name: _result(p, name) for name, p in procs.items()}
    load1 = os.getloadavg()[0]
    print(f"ingest done in {time.monotonic() - started:.0f} s; load {load1:.2f} at the end")
    n = got["after"]["samples"]
    assert all(r["samples"] == n for r in got.values())
    b, a, f = (got[k] for k in ("before", "after", "floor"))
    bytes_b, bytes_a = b["bytes"] / n, a["bytes"] / n
    cpu_b, cpu_a, cpu_f = (r["cpu"] / n * 1e6 for r in (b, a, f))
    print(f"{'':44}{'before':>12}{'after':>12}")
    print(f"{'bytes per GPU-sample (file + WAL)':44}{bytes_b:12.2f}{bytes_a:12.2f}")
    print(f"{'store CPU us per GPU-sample':44}{cpu_b:12.2f}{cpu_a:12.2f}   after/before {cpu_a / cpu_b:.2f}")
    print(f"{'  of it, all but the samples (the floor)':44}{'':12}{cpu_f:12.2f}   "
          f"floor/before {cpu_f / cpu_b:.2f}")
    print(f"{'  the samples themselves (after - floor)':44}{'':12}{cpu_a - cpu_f:12.2f}")
    print("after, bytes per GPU-sample by table: " + ", ".join(
        f"{name} {size / n:.2f}" for name, size in a["tables"].items() if size / n >= 0.05))
    met = {"<= 8 bytes/sample": bytes_a <= 8, "CPU <= 1/4 before": cpu_a <= cpu_b / 4}
    if not args.no_reads:
        rb = _result(_child(old, ["reads", "--data", args.data]), "reads before")
        ra = _result(_child(None, ["reads", "--data", args.data]), "reads after")
        print(f"{'hour of raw, one GPU (gpu_history, ms)':44}{rb['hour_gpu_history']:12.2f}"
              f"{ra['hour_gpu_history']:12.2f}")
        print(f"{'hour of raw, one GPU (raw_history, ms)':44}{'-':>12}{ra['hour_raw_history']:12.2f}")
        print(f"{'30-day history --host (history op, ms)':44}{rb['month_history_op']:12.2f}"
              f"{ra['month_history_op']:12.2f}")
        print(f"{'30-day history, gpu_history alone (ms)':44}{rb['month_gpu_history']:12.2f}"
              f"{ra['month_gpu_history']:12.2f}")
        met["hour of one GPU < 20 ms"] = max(ra["hour_raw_history"], ra["hour_gpu_history"]) < 20
        met["30-day history < 50 ms"] = ra["month_history_op"] < 50
        print(f"load {os.getloadavg()[0]:.2f} after the reads")
    print("goals: " + "; ".join(f"{k}: {'OK' if ok else 'MISSED'}" for k, ok in met.items()))
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
