"""A churning fleet for the per-change tests (issue 33): GPUs that change what they do every minute or two and
processes that come, go, grow and compute more or less every second, fed to the collector either as fresh
objects each sample (what every consumer saw before) or through the 1.3 wire (the agent's delta encoder, the
collector's decoder and edge, which keeps unchanged process lists shared)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from gpufleet.agent import delta, wire
from gpufleet.collector.model import sample
from gpufleet.collector.transport import wirefast
from gpufleet.collector.transport.delta import DeltaBase

Feed = Iterator[tuple[str, sample.Snapshot]]


def edge(base: DeltaBase, frame: sample.Frame | sample.Delta) -> sample.Snapshot:
    """What the stream hands on: a delta applied to the connection's base, a full frame made the base."""
    if isinstance(frame, sample.Delta):
        return base.apply(frame, float("inf"))
    assert isinstance(frame, sample.Snapshot)
    return base.full(frame, float("inf"))


def host(host: str, seconds: int) -> Iterator[wire.Snapshot]:
    """A host whose GPUs change what they do every minute or two (busy, idle while held, sawing, empty,
    memory left behind, a zombie, an orphan of init) and whose processes come, go, grow and compute more or
    less every second: every rule's case, and every kind of change a delta carries."""
    rng = random.Random(host)
    phases = ["busy", "idle", "saw", "empty", "orphaned", "zombie", "init", "low"]
    plan = [[rng.choice(phases) for _ in range(seconds // 60 + 1)] for _ in range(4)]
    for t in range(seconds):
        gpus = []
        for i in range(4):
            phase = plan[i][t // 60]
            epoch = t // 60  # the processes of a phase are its own (new pids, new start times)
            procs = []
            if phase not in ("empty", "orphaned"):
                steady = phase == "saw"  # an input-bound job: its memory does not move
                for j in range(1 if steady else 1 + (t // 20 + i) % 3):  # a second and third come and go
                    pid = 1000 * (i + 1) + 10 * epoch + j
                    grown = 0 if steady else t // 30 % 2
                    procs.append(wire.ProcessSample(
                        pid=pid, user=f"u{(i + j) % 3}", gpu_memory=(4 + j + grown) << 30,
                        sm_util=rng.randint(0, 9) if phase != "busy" else rng.randint(60, 99),
                        mem_util=1,
                        command=f"python job{j}.py --rank {j}", start_time=1.6e9 + pid,
                        state="Z" if phase == "zombie" and j == 0 else "S",
                        ppid=1 if phase == "init" else 50 + i, job=str(77 + i) if i % 2 else None))
            util = {"busy": 95, "idle": 1, "saw": 95 if t % 10 < 6 else 8, "empty": 0, "orphaned": 0,
                    "zombie": 40, "init": 0, "low": 15 + t % 10}[phase]
            used = sum(p.gpu_memory or 0 for p in procs) + (30 << 30 if phase == "orphaned" else 1 << 24)
            gpus.append(wire.GpuSample(
                index=i, uuid=f"GPU-{host}-{i}", name="A100", util_gpu=util, util_mem=3,
                memory_total=80 << 30, memory_used=min(used, 80 << 30), temperature=60 + rng.randint(0, 2),
                power_draw=100.0 + util * 3, power_limit=400.0, throttle_reasons=[], processes=procs))
        yield wire.Snapshot(ts=1_700_000_000.0 + t, seq=t + 1, gpus=gpus, proto=wire.FRAME_PROTO)


def fleet(hosts: int, seconds: int, wire_path: bool) -> Feed:
    """``hosts`` churning hosts second by second: each snapshot decoded anew (a fresh object, as every
    sample was before), or through the 1.3 wire (delta encoder, decoder, edge)."""
    streams = [host(f"h{h}", seconds) for h in range(hosts)]
    encoders = [delta.DeltaEncoder(keyframe_every=float("inf")) for _ in streams]
    bases = [DeltaBase() for _ in streams]
    for encoder in encoders:
        encoder.accept()
    for _ in range(seconds):
        for h, (stream, encoder, base) in enumerate(zip(streams, encoders, bases, strict=True)):
            snap = next(stream)
            if wire_path:
                yield f"h{h}", edge(base, wirefast.decode(encoder.encode(snap)))
            else:
                yield f"h{h}", wirefast.decode(wire.encode(snap))  # type: ignore[misc]
