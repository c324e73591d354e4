"""The one definition of "allocated but unused": the GPUs a running Slurm job holds on a host against the GPUs
its processes are on.

Slurm gives a job GPUs (``scontrol -o show job -d``: ``GRES=gpu:2(IDX:0-1)``; the agent sends them as
``Snapshot.allocations``), and nothing stops the job from running on only some of them, or none: the most
common waste on a Slurm cluster (Princeton's jobstats exists for it). Per running allocation and per GPU:

- *used*: at least one process listed on the GPU carries the job's id (the agent's cgroup attribution);
- *unused*: the GPU is in the snapshot, readable, its process list known, and no process of the job is on it;
- neither (not judged): the GPU is missing from the snapshot (Slurm's index is not one NVML lists: see
  wire.SlurmAllocation on IDX vs NVML index), lost, or its process list could not be read: "unknown" is
  never "unused".

Only jobs Slurm says are RUNNING count: a suspended or completing job's GPUs are not "held and unused" in any
sense its owner can act on. A GPU allocated to a running job is never *free* capacity (classify.is_free), used
or not: the scheduler will not give it to anyone else.

Every reader asks here: the ``allocated_unused`` rule, the GPU-hours accounting (allocated and unused hours,
collector/fleet/accounting.py), the job records, the status view and the metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gpufleet.collector.model.classify import processes_unknown
from gpufleet.collector.model.sample import GpuSample, SlurmAllocation, Snapshot

#: The Slurm state of a job whose allocation counts.
RUNNING: Final = "RUNNING"


@dataclass(frozen=True, slots=True)
class AllocationUse:
    """One running job's GPUs on one host, used or not (module docstring)."""

    allocation: SlurmAllocation
    allocated: tuple[int, ...]  # the GPU indexes Slurm gave the job here, sorted, no repeats
    used: tuple[int, ...]  # of those, GPUs a process of the job is on
    unused: tuple[int, ...]  # of those, readable GPUs with no process of the job

    @property
    def job(self) -> str:
        return self.allocation.job


def is_running(a: SlurmAllocation) -> bool:
    return a.state == RUNNING


def allocated_indexes(snapshot: Snapshot) -> frozenset[int]:
    """The GPU indexes some running job holds (what is not free capacity, whoever uses it)."""
    if not snapshot.allocations:
        return frozenset()
    return frozenset(i for a in snapshot.allocations if is_running(a) for i in a.gpu_indexes)


def use_of(allocation: SlurmAllocation, gpus: Sequence[GpuSample]) -> AllocationUse:
    """What the job does with the GPUs Slurm gave it, judged from one snapshot's GPUs."""
    return _use(allocation, _jobs_on(gpus))


def uses(snapshot: Snapshot) -> list[AllocationUse]:
    """Every running job's use of its GPUs on the host, in the agent's order (by job id)."""
    if not snapshot.allocations:
        return []
    on = _jobs_on(snapshot.gpus)
    return [_use(a, on) for a in snapshot.allocations if is_running(a)]


def _jobs_on(gpus: Sequence[GpuSample]) -> dict[int, tuple[set[str | None], bool]]:
    """GPU index -> (the jobs of the processes listed on it, whether "none of them" can be judged: not where
    the GPU is lost or its process list unreadable)."""
    return {g.index: ({p.job for p in g.processes}, g.error is None and not processes_unknown(g))
            for g in gpus}


def _use(allocation: SlurmAllocation, on: dict[int, tuple[set[str | None], bool]]) -> AllocationUse:
    job = allocation.job
    indexes = allocation.gpu_indexes
    allocated = tuple(sorted(set(indexes))) if len(indexes) > 1 else tuple(indexes)
    used: list[int] = []
    unused: list[int] = []
    for index in allocated:
        here = on.get(index)
        if here is None:
            continue  # not a GPU this snapshot lists
        if job in here[0]:
            used.append(index)
        elif here[1]:
            unused.append(index)
    return AllocationUse(allocation, allocated, tuple(used), tuple(unused))
