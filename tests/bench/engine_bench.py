"""The alert engine's cost per snapshot, rule by rule (run by hand): where the daemon's largest share goes.

    .venv/bin/python -m tests.bench.engine_bench [--hosts 150] [--gpus 8] [--procs 8] [--samples 20]

The engine of the default config (every default rule) gets the simulator's frames of ``--hosts`` hosts,
decoded by the collector's decoder and made snapshots by the stream's edge (collector/transport/delta.py: 1.3
deltas, or with ``--full`` the full frames of a pre-1.3 agent), as the live view hands them over. The daemon's
cycle-collector settings
apply (collector/service/gcpause.py). It is warmed with as many samples as it is then measured on, so the
rules' windows hold data. It prints:
- the engine's CPU per snapshot;
- beside it, ``json.loads`` of one frame (the least a collector does per sample);
- each rule's observe and conditions time per snapshot.

Exits 1 when the engine alone takes more than issue 13's budget for the whole collector (0.15 ms per
host-sample).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.model import sample
from gpufleet.collector.service import gcpause
from gpufleet.collector.settings import Config, HostConfig
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.transport import wirefast
from gpufleet.collector.transport.delta import DeltaBase

TARGET_MS = 0.15


Spent = Counter[tuple[str, str]]


def _timed(fn: Callable[..., Any], key: tuple[str, str], spent: Spent) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start

    return run


def _edge(edge: DeltaBase, frame: Any) -> sample.Snapshot:
    """What the stream hands on: a delta applied to the connection's base, a full frame made the base."""
    if isinstance(frame, sample.Delta):
        return edge.apply(frame, float("inf"))
    assert isinstance(frame, sample.Snapshot)
    return edge.full(frame, float("inf"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=150)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=8, help="processes per GPU")
    ap.add_argument("--samples", type=int, default=20, help="samples per host measured (as many warm it)")
    ap.add_argument("--full", action="store_true", help="full frames (a pre-1.3 agent) instead of deltas")
    args = ap.parse_args()
    gcpause.tune_for_daemon()
    names = [f"node{i:04d}" for i in range(args.hosts)]
    engine = AlertEngine(Config(hosts=[HostConfig(name=n) for n in names]), None)
    gens = [FrameGenerator(n, args.gpus, procs=args.procs) for n in names]
    lines = [[g.snapshot(s) if args.full or s == 1 else g.delta(s) for g in gens]
             for s in range(1, 2 * args.samples + 1)]
    edges = [DeltaBase() for _ in gens]
    frames = [[_edge(edge, wirefast.decode(line)) for edge, line in zip(edges, row, strict=True)]
              for row in lines]

    def feed(rows: range) -> float:
        start = time.process_time()
        for s in rows:
            for name, frame in zip(names, frames[s], strict=True):
                engine.frame(name, frame, 1000.0 + s)
        return time.process_time() - start

    feed(range(args.samples))
    whole = feed(range(args.samples, 2 * args.samples))
    spent: Spent = Counter()
    for name, rule in engine.rules.items():
        for method in ("observe_snapshot", "conditions"):
            setattr(rule, method, _timed(getattr(rule, method), (name, method), spent))
    feed(range(args.samples, 2 * args.samples))
    n = args.samples * args.hosts
    line = lines[0][0]
    start = time.process_time()
    for _ in range(2000):
        json.loads(line)
    floor_ms = (time.process_time() - start) / 2000 * 1e3
    engine_ms = whole / n * 1e3
    print(f"python {sys.version.split()[0]}; {args.hosts} hosts x {args.gpus} GPUs x {args.procs} processes, "
          f"{args.samples} samples each, {len(engine.rules)} rules, "
          f"{'full frames' if args.full else '1.3 deltas'}")
    print(f"  engine, CPU per snapshot        {engine_ms:.3f} ms  ({engine_ms / floor_ms:.1f}x the floor)")
    print(f"  floor: json.loads of one frame  {floor_ms:.3f} ms")
    print(f"  the rules' share ({sum(spent.values()) / n * 1e3:.3f} ms per snapshot), largest first:")
    for (rule, method), seconds in spent.most_common(12):
        print(f"    {rule:<18} {method:<17} {seconds / n * 1e6:7.1f} us")
    if engine_ms > TARGET_MS:
        print(f"MISSED: the engine alone takes {engine_ms:.3f} ms per host-sample, over the collector's "
              f"{TARGET_MS} ms budget (issue 13)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
