"""What Slurm allocations add to the collector's work per snapshot (run by hand).

An 8-GPU x 8-process snapshot whose processes belong to four Slurm jobs of two GPUs each. The baseline is what
the alert engine does with every snapshot: the one classification (model/facts.py ``SnapshotFacts.build``)
and every other default rule's observe and conditions. Against it, what the allocations add to every
snapshot: the allocated-unused answer (model/allocation.py ``uses``, once: SnapshotFacts shares it), the
``allocated_unused`` rule's conditions, and the GPU-hours charge of each job twice (the store's accounting and
the job tracker: fleet/accounting.py). Target: under 10 % of the baseline. Exits 1 when missed.

    .venv/bin/python -m tests.bench.allocation_bench [--samples 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from gpufleet.collector.fleet.accounting import allocation_charge
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import SnapshotFacts
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.rules.base import HostContext
from gpufleet.collector.rules.registry import build_rules
from gpufleet.collector.settings import default_rules

from tests.builders import gpu, proc, snap

TARGET = 0.10  # of the baseline


def _snapshot() -> sample.Snapshot:
    gpus = [gpu(i, util=80, procs=[proc(1000 + 8 * i + j, f"user{i // 2}", job=str(100 + i // 2), start=1.0)
                                   for j in range(8)]) for i in range(8)]
    s = snap(*gpus, ts=1000.0)
    s.allocations = [sample.SlurmAllocation(job=str(100 + k), gpu_indexes=[2 * k, 2 * k + 1], user=f"user{k}",
                                            account="nlp", state="RUNNING") for k in range(4)]
    s.gpus[7].processes = []  # one GPU a job holds and does not use
    return s


def _median(work: Callable[[], object], n: int) -> float:
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            work()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=5000)
    n = ap.parse_args().samples
    s = _snapshot()
    rules = build_rules(default_rules())
    rule = rules.pop("allocated_unused")
    ctx = HostContext(name="n3", snapshot=s)
    seconds = {g.index: 1.0 for g in s.gpus}

    def engine() -> None:
        ctx.facts = SnapshotFacts.build("n3", s, DEFAULT_THRESHOLDS)
        for r in rules.values():
            if r.on_snapshot:
                r.observe_snapshot(ctx, s, 1000.0)
                r.conditions(ctx, 1000.0)

    engine()
    assert ctx.facts is not None and ctx.facts.agrees(s, rule.thresholds)

    def allocations() -> None:
        assert ctx.facts is not None
        ctx.facts.allocations = None  # a new snapshot's facts: worked out once, then shared
        running = ctx.facts.allocation_uses()
        rule.conditions(ctx, 1000.0)
        for _ in range(2):  # the store's accounting and the job tracker
            for use in running:
                allocation_charge(use, seconds)

    base = _median(engine, n)
    added = _median(allocations, n)
    share = added / base
    print(f"the engine's rules (baseline): {base * 1e6:8.1f} us per snapshot")
    print(f"what 4 allocations add:        {added * 1e6:8.1f} us per snapshot = {share:.1%} of the baseline "
          f"(target < {TARGET:.0%})")
    return 0 if share < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
