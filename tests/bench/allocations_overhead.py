"""What reporting Slurm allocations and Kubernetes names costs, per sample and per listing (run by hand).

- sampling path: ``SlurmResolver.allocations()`` (the sampler's one call per sample, a cache read) for 8 jobs
  holding GPUs, beside the same call with no job on the node (baseline);
- the wire: an 8-GPU snapshot's bytes, agent encode and collector decode (msgspec fast path) with and
  without those 8 allocations;
- background: one listing of the node's jobs from a cgroup v1 tree of 64 jobs (every 30 s);
- ``KubeletLogs.names`` for a known pod (a dict read), beside a dict read.

Exits 1 when the sampling path's added cost exceeds :data:`TARGET_US` per sample.

    .venv/bin/python tests/bench/allocations_overhead.py [--n 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent import wire
from gpufleet.agent.k8s import KubeletLogs
from gpufleet.agent.slurm import SlurmJob, SlurmResolver
from gpufleet.agent.slurm_node import cgroup_bases, cgroup_jobs
from gpufleet.collector.transport import wirefast

from tests.k8s.kubelet_tree import Pod, add_pod, container_id  # noqa: E402

TARGET_US = 10.0


def _per_call(fn: Callable[[], object], n: int) -> float:
    """Median over 7 runs of the mean seconds per call."""
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def _resolver(jobs: int) -> SlurmResolver:
    table = {str(100 + i): SlurmJob(str(100 + i), f"train-{i}", "alice", "nlp", "gpu", "RUNNING", (i,))
             for i in range(jobs)}
    r = SlurmResolver(table.get, lister=lambda: set(table), start=False)
    r.list_once()
    while r.work_once(0):
        pass
    return r


def _snapshot(allocations: list[wire.SlurmAllocation]) -> wire.Snapshot:
    gpus = [wire.GpuSample(index=i, uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000", name="NVIDIA H100",
                           util_gpu=37, memory_total=80 << 30, memory_used=20 << 30, temperature=60,
                           power_draw=300.5, throttle_reasons=[],
                           processes=[wire.ProcessSample(pid=4000 + i, gpu_memory=20 << 30, sm_util=30,
                                                         user="alice", command="python train.py",
                                                         start_time=1.7e9, state="R", job=str(100 + i))])
            for i in range(8)]
    return wire.Snapshot(ts=1.7e9, seq=1, gpus=gpus, allocations=allocations)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    jobs = [str(100 + i) for i in range(8)]
    idle, busy = _resolver(0), _resolver(8)
    assert len(busy.allocations(jobs)) == 8
    base = _per_call(lambda: idle.allocations(jobs), n)
    full = _per_call(lambda: busy.allocations(jobs), n)
    added = (full - base) * 1e6
    print(f"allocations() per sample: no job {base * 1e6:.2f} us, 8 jobs holding GPUs {full * 1e6:.2f} us "
          f"(+{added:.2f} us; target {TARGET_US:g})")

    plain, alloc = _snapshot([]), _snapshot(busy.allocations(jobs))
    lines = [wire.encode(plain), wire.encode(alloc)]
    enc = [_per_call(lambda s=s: wire.encode(s), n // 10) for s in (plain, alloc)]  # type: ignore[misc]
    dec = [_per_call(lambda b=b: wirefast.decode(b), n // 10) for b in lines]  # type: ignore[misc]
    assert wirefast.fast_decode(lines[1]) is not None  # the fast path takes it
    print(f"8-GPU snapshot: {len(lines[0])} -> {len(lines[1])} bytes; agent encode {enc[0] * 1e6:.1f} -> "
          f"{enc[1] * 1e6:.1f} us; collector decode {dec[0] * 1e6:.1f} -> {dec[1] * 1e6:.1f} us")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(64):
            for ctl in ("freezer", "memory", "devices"):
                job = root / ctl / "slurm" / f"uid_{1000 + i % 8}" / f"job_{500 + i}"
                (job / "step_batch").mkdir(parents=True)
        listing = _per_call(lambda: cgroup_jobs(cgroup_bases(root, None)), 50)
        assert len(cgroup_jobs(cgroup_bases(root, None))) == 64
        print(f"listing 64 jobs from a cgroup v1 tree (3 controllers): {listing * 1e6:.0f} us, every 30 s")

        pod = Pod("research", "trainer-0", {"pytorch": container_id("a"), "sidecar": container_id("b")})
        add_pod(root / "log", pod)
        logs = KubeletLogs(root / "log")
        cid = pod.containers["pytorch"]
        assert logs.names(pod.uid, cid) is not None
        table = {pod.uid: 1}
        hit = _per_call(lambda: logs.names(pod.uid, cid), n)
        read = _per_call(lambda: table.get(pod.uid), n)
        print(f"KubeletLogs.names, known pod: {hit * 1e6:.2f} us (a dict read: {read * 1e6:.2f} us); "
              f"called only for a new process or one not yet named")
    if added > TARGET_US:
        print(f"FAIL: allocations() adds {added:.2f} us per sample (target {TARGET_US:g})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
