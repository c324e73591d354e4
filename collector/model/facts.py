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
:func:`~gpufleet.collector.model.classify.waste_of` and :func:`~gpufleet.collector.model.jobkey.keys`.

Per change, not per sample (issue 33): what depends on a GPU's processes (holders, zombies, job and group
keys, whose holding is waste when the GPU idles and when it does not) is worked out when they change. A
GPU whose process list is the very list of the host's previous snapshot (the stream's edge keeps it one
object while its processes stay the same but for their utilization, collector/transport/delta.py) keeps
those answers, and its :attr:`GpuFacts.memo`, where each reader keeps what it derives from the processes
(the job tracker its jobs, the store its span keys): only the activity is worked out per sample. Otherwise
afresh, except each process's job and group keys: they depend only on what identifies the process (pid,
start time, Slurm job, container, parent, command), so a process seen in the host's previous snapshot with
all of these the same keeps the keys worked out then (most processes live for many samples).
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
class Roster:
    """What one GPU's processes say as long as they stay the same (module docstring): shared by every
    sample of the GPU until they change. Never changed once built; ``memo`` is the readers' (each under its
    own key), for what they derive from the processes."""

    processes: list[sample.ProcessSample]  # the process list it was worked out from (the edge's object)
    holders: dict[str, list[sample.ProcessSample]]  # user -> live processes holding min_memory (classify)
    zombies: list[sample.ProcessSample]
    jobs: dict[int, str]  # pid -> job key (jobkey.job_key)
    groups: dict[int, str]  # pid -> group key (jobkey.group_key), for idle_peers
    waste_idle: list[str]  # waste_of when the GPU is idle or stuck
    waste_busy: list[str]  # waste_of otherwise (zombies holding memory)
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class GpuFacts:
    """One GPU sample, classified. ``jobs`` and ``groups`` are keyed by pid (one entry per process on it)."""

    gpu: sample.GpuSample
    activity: Activity | None
    roster: Roster
    #: True when the GPU's processes are not those of the host's previous snapshot (or it had none)
    changed: bool = True

    @property
    def holders(self) -> dict[str, list[sample.ProcessSample]]:
        """user -> live processes holding min_memory (classify.holdings); do not change it (shared)."""
        return self.roster.holders

    @property
    def waste(self) -> list[str]:
        """Users whose holding is waste (classify.waste_of): GPU-hours' and jobs' "wasted"."""
        r = self.roster
        return r.waste_idle if self.activity in ("idle", "stuck") else r.waste_busy

    @property
    def jobs(self) -> dict[int, str]:
        return self.roster.jobs

    @property
    def groups(self) -> dict[int, str]:
        return self.roster.groups

    @property
    def memo(self) -> dict[str, Any]:
        """The readers' cache for this roster (same dict while the processes stay the same)."""
        return self.roster.memo


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
        same_host = previous is not None and previous.host == host
        prior: list[GpuFacts] = []  # the previous snapshot's GPUs, whose rosters may carry over
        if same_host and previous is not None and (previous.thresholds is thresholds
                                                   or previous.thresholds == thresholds):
            prior = previous.gpus
        before = previous.known_keys if same_host and previous is not None else {}
        known: dict[ProcIdentity, tuple[str, str]] | None = None
        for i, g in enumerate(snapshot.gpus):
            roster: Roster | None = None
            if i < len(prior) and prior[i].roster.processes is g.processes:
                roster = prior[i].roster  # the same GPU in the same place: the common case
            elif prior:
                roster = next((gf.roster for gf in prior if gf.roster.processes is g.processes), None)
            changed = roster is None
            if changed:
                if known is None:
                    known = {}
                roster = _roster(host, g, thresholds, before, known)
            assert roster is not None
            gpus.append(GpuFacts(g, activity(g, thresholds), roster, changed))
        if known is None:  # every GPU's processes as before: so are their keys
            return cls(host, snapshot, thresholds, gpus, before)
        for gf in gpus:  # the keys of the processes whose GPU did not change, for the next snapshot
            if not gf.changed:
                for p in gf.roster.processes:
                    known[_identity(p)] = (gf.roster.jobs[p.pid], gf.roster.groups[p.pid])
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


def _roster(host: str, g: sample.GpuSample, thresholds: Thresholds,
            before: dict[ProcIdentity, tuple[str, str]],
            known: dict[ProcIdentity, tuple[str, str]]) -> Roster:
    held, zombies = holdings(g, thresholds)
    jobs, groups = {}, {}
    for p in g.processes:
        ident = _identity(p)
        pair = before.get(ident)
        if pair is None:
            pair = keys(host, p)
        known[ident] = pair
        jobs[p.pid], groups[p.pid] = pair
    return Roster(g.processes, held, zombies, jobs, groups, waste_of("idle", held, zombies, thresholds),
                  waste_of(None, held, zombies, thresholds))


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
