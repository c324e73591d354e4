"""What the Slurm resolver adds to one agent sample (run by hand).

The fake backend's busy scenario (4 GPUs, one process each, all in Slurm job 90210): the sampler's
attribution step (the only place the resolver is asked) timed with and without a resolver whose cache
already knows the job. The difference is the sampling path's whole cost (a locked dict read per process and
five attribute copies); scontrol itself runs on the resolver's thread.
The encoded frame's growth is printed too.

    .venv/bin/python -m tests.bench.slurm_overhead [--samples 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpufleet.agent import fake, wire
from gpufleet.agent.nvml import Gateway
from gpufleet.agent.sampler import Sampler
from gpufleet.agent.slurm import SlurmJob, SlurmResolver


def _sampler(resolver: SlurmResolver | None) -> Sampler:
    lib = fake.FakeNvml(fake.load_scenario("busy"))
    s = Sampler(Gateway(lib, backend="fake"), fake.FakeProcs(lib), slurm=resolver)
    s.open()
    return s


def _per_sample(s: Sampler, n: int) -> float:
    """Median over 7 runs of the mean seconds of the attribution step (where the resolver is asked) of one
    sample: the rest of a sample (NVML reads) does not change, and only adds noise."""
    gpus = s.sample()[0].gpus
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            s._attribute(gpus)
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20000)
    args = ap.parse_args()
    job = SlurmJob("90210", "train-llm", "carol", "nlp", "h100", "RUNNING")
    resolver = SlurmResolver(lambda _id: job, start=False)
    resolver.get("90210")
    resolver.work_once(0)
    plain, named = _sampler(None), _sampler(resolver)
    assert named.sample()[0].gpus[0].processes[0].job_name == "train-llm"
    for s in (plain, named):
        _per_sample(s, 500)  # warm up
    pairs = [(_per_sample(plain, args.samples), _per_sample(named, args.samples)) for _ in range(3)]
    base, with_slurm = min(p[0] for p in pairs), min(p[1] for p in pairs)
    procs = sum(len(g.processes) for g in plain.sample()[0].gpus)
    size0, size1 = len(wire.encode(plain.sample()[0])), len(wire.encode(named.sample()[0]))
    print(f"attribution per sample ({len(plain.gpus)} GPUs, {procs} processes in a Slurm job): "
          f"without resolver {base * 1e6:.2f} us, with {with_slurm * 1e6:.2f} us, "
          f"added {(with_slurm - base) * 1e6:.2f} us "
          f"({(with_slurm - base) / procs * 1e6:.2f} us per process)")
    snaps = (plain.sample()[0], named.sample()[0])
    enc = [min(_encode(snap, 2000) for _ in range(5)) for snap in snaps]
    print(f"snapshot frame: {size0} -> {size1} bytes (+{size1 - size0}); encode {enc[0] * 1e6:.1f} -> "
          f"{enc[1] * 1e6:.1f} us (+{(enc[1] - enc[0]) * 1e6:.1f})")


def _encode(snap: wire.Snapshot, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        wire.encode(snap)
    return (time.perf_counter() - t0) / n


if __name__ == "__main__":
    main()
