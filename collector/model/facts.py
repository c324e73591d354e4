"""What the one classification (collector/model/classify.py) says of a whole snapshot, worked out once per
snapshot.

Every rule, and the job tracker, asks the same questions of each GPU sample: what is it doing, who holds it,
whose holding is waste, which job each process belongs to. Asked separately, a snapshot of 8 GPUs x 8
processes had its holders worked out five times and its job keys twice (issue 13's profile: per-process
Python was most of the loop's cost). Here they are answered once, and :class:`FleetFacts` keeps each host's
latest answer, so whoever asks first pays and the others read (the alert engine asks first, the job tracker
after it: collector/service/daemon.py shares one instance).

The answers are classify's and jobkey's, never a second definition: :meth:`SnapshotFacts.build` calls
:func:`~gpufleet.collector.model.classify.activity`, :func:`~gpufleet.collector.model.classify.holdings`,
:func:`~gpufleet.collector.model.classify.waste_of` and :func:`~gpufleet.collector.model.jobkey.keys`. Samples
are not changed after decode, so an answer stays true for its snapshot; a new snapshot (another object) is
worked out afresh, except each process's job and group keys: they depend only on what identifies the process
(pid, start time, Slurm job, container, parent, command), so a process seen in the host's previous snapshot
with all of these the same keeps the keys worked out then (most processes live for many samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import AllocationUse, uses
from gpufleet.collector.model.classify import Activity, activity, holdings, waste_of
from gpufleet.collector.model.jobkey import keys
from gpufleet.collector.model.thresholds import Thresholds


@dataclass(slots=True)
class GpuFacts:
    """One GPU sample, classified. ``jobs`` and ``groups`` are keyed by pid (one entry per process on it)."""

    gpu: sample.GpuSample
    activity: Activity | None
    holders: dict[str, list[sample.ProcessSample]]  # user -> live processes holding min_memory (classify)
    waste: list[str]  # users whose holding is waste (classify.waste_of): GPU-hours' and jobs' "wasted"
    jobs: dict[int, str]  # pid -> job key (jobkey.job_key)
    groups: dict[int, str]  # pid -> group key (jobkey.group_key), for idle_peers


#: every input of jobkey.keys but the host: equal identities have equal keys
ProcIdentity: TypeAlias = tuple[Any, ...]


def _identity(p: sample.ProcessSample) -> ProcIdentity:
    return (p.pid, p.start_time, p.job, p.container, p.ppid, p.command)


@dataclass(slots=True)
class SnapshotFacts:
    host: str
    snapshot: sample.Snapshot
    thresholds: Thresholds
    gpus: list[GpuFacts]
    #: the keys of this snapshot's processes by identity, for the next snapshot of the host to reuse
    known_keys: dict[ProcIdentity, tuple[str, str]] = field(default_factory=dict, repr=False)
    #: the running Slurm jobs' use of their GPUs (:meth:`allocation_uses`), worked out on first ask
    allocations: list[AllocationUse] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, host: str, snapshot: sample.Snapshot, thresholds: Thresholds,
              previous: SnapshotFacts | None = None) -> SnapshotFacts:
        """``previous``: the host's last facts, whose processes' keys carry over (module docstring)."""
        gpus = []
        before = previous.known_keys if previous is not None and previous.host == host else {}
        known: dict[ProcIdentity, tuple[str, str]] = {}
        for g in snapshot.gpus:
            kind = activity(g, thresholds)
            held, zombies = holdings(g, thresholds)
            jobs, groups = {}, {}
            for p in g.processes:
                ident = _identity(p)
                pair = before.get(ident)
                if pair is None:
                    pair = keys(host, p)
                known[ident] = pair
                jobs[p.pid], groups[p.pid] = pair
            gpus.append(GpuFacts(g, kind, held, waste_of(kind, held, zombies, thresholds), jobs, groups))
        return cls(host, snapshot, thresholds, gpus, known)

    def allocation_uses(self) -> list[AllocationUse]:
        """model/allocation.py's answer for this snapshot, shared by the ``allocated_unused`` rule, the job
        tracker and the GPU-hours accounting (whoever asks first works it out)."""
        found = self.allocations
        if found is None:
            found = self.allocations = uses(self.snapshot)
        return found

    def agrees(self, snapshot: sample.Snapshot, thresholds: Thresholds) -> bool:
        """Are these the facts of this snapshot under these thresholds?"""
        return self.snapshot is snapshot and (self.thresholds is thresholds or self.thresholds == thresholds)


class FleetFacts:
    """Each host's latest :class:`SnapshotFacts`: one per host, replaced by the next snapshot."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._latest: dict[str, SnapshotFacts] = {}

    def of(self, host: str, snapshot: sample.Snapshot) -> SnapshotFacts:
        facts = self._latest.get(host)
        if facts is None or facts.snapshot is not snapshot:
            facts = self._latest[host] = SnapshotFacts.build(host, snapshot, self.thresholds, facts)
        return facts
