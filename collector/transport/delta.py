"""The host's picture on one connection, which 1.3 delta frames apply to (agent/delta.py has the format).

The rest of the collector sees whole snapshots, as from any agent: this module turns each delta into one.
It is also where the collector's work per change begins. Each GPU's process list is one object for as long
as the processes on it stay the same in everything but their utilization: a sample whose processes only
computed more or less keeps the list (and the process objects in it), their ``sm_util`` and ``mem_util``
updated in place. So whoever derives something from a GPU's processes (holders, job keys, spans,
collector/model/facts.py) asks ``g.processes is previous.processes`` and works it out again only when they
changed. Full snapshots (agents before 1.3, and a 1.3 agent's keyframes) go the same way: a GPU whose
decoded processes equal the base's but for their utilization keeps the base's list.

The cost of the in-place update: a process object's utilization is the latest reading, not its sample's.
Nothing reads an old sample's utilization but the store's spans, which copy it when the sample arrives
(collector/store/store.py). Everything else about a process object never changes.

A delta that does not apply (its base is not the last frame, or it names a GPU or a pid the base lacks)
raises :class:`DeltaMismatch`: the stream drops it and asks the agent for a keyframe.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.collector.model import sample


class DeltaMismatch(Exception):
    """A delta that does not apply to the base; ``str()`` says why."""


def _start_bound(processes: Sequence[sample.ProcessSample], latest: float) -> None:
    """A start later than the sample that shows it is unknown, not a bogus span (transport/stream.py)."""
    for p in processes:
        if p.start_time is not None and p.start_time > latest:
            p.start_time = None


def same_but_util(old: Sequence[sample.ProcessSample], new: Sequence[sample.ProcessSample]) -> bool:
    """Are these the same processes, in the same order, in everything but their utilization?"""
    if len(old) != len(new):
        return False
    for o, n in zip(old, new, strict=True):
        if o.pid != n.pid:
            return False
        sm, mu = n.sm_util, n.mem_util
        n.sm_util, n.mem_util = o.sm_util, o.mem_util
        same = n == o
        n.sm_util, n.mem_util = sm, mu
        if not same:
            return False
    return True


def _fill(gd: sample.GpuDelta, old: sample.GpuSample, procs: list[sample.ProcessSample]) -> None:
    """Make the delta's GPU the GPU's sample: its constants from the base, its processes (sample.GpuDelta:
    these are UNSET in a delta, so typed so)."""
    gd.processes = procs  # type: ignore[assignment]
    gd.uuid = old.uuid  # type: ignore[assignment]
    gd.name = old.name  # type: ignore[assignment]
    gd.serial = old.serial  # type: ignore[assignment]
    gd.pci_bus_id = old.pci_bus_id  # type: ignore[assignment]
    gd.memory_total = old.memory_total  # type: ignore[assignment]
    gd.power_limit = old.power_limit  # type: ignore[assignment]
    gd.temp_slowdown = old.temp_slowdown  # type: ignore[assignment]
    gd.temp_shutdown = old.temp_shutdown  # type: ignore[assignment]
    gd.mig_mode = old.mig_mode  # type: ignore[assignment]
    gd.pids = gd.changed = gd.util = None


class DeltaBase:
    """The last snapshot of one connection (the base a delta applies to), and the process lists it shares."""

    def __init__(self) -> None:
        self.snapshot: sample.Snapshot | None = None
        self._slots: dict[int, int] = {}  # GPU index -> its position in the base
        self._pids: dict[int, tuple[list[sample.ProcessSample], dict[int, sample.ProcessSample]]] = {}

    def full(self, snap: sample.Snapshot, latest_start: float) -> sample.Snapshot:
        """A whole snapshot: the new base. Each GPU (same position, index and UUID as in the base) whose
        processes are the base's but for their utilization keeps the base's process list."""
        base = self.snapshot
        for g in snap.gpus:
            _start_bound(g.processes, latest_start)
        if base is not None and len(base.gpus) == len(snap.gpus):
            for old, new in zip(base.gpus, snap.gpus, strict=True):
                if old.index != new.index or old.uuid != new.uuid or old.processes is new.processes:
                    continue
                if same_but_util(old.processes, new.processes):
                    for o, n in zip(old.processes, new.processes, strict=True):
                        o.sm_util, o.mem_util = n.sm_util, n.mem_util
                    new.processes = old.processes
        self._rebase(snap)
        return snap

    def apply(self, delta: sample.Delta, latest_start: float) -> sample.Snapshot:
        """The snapshot ``delta`` describes; it becomes the base. Raises DeltaMismatch."""
        base = self.snapshot
        if base is None:
            raise DeltaMismatch(f"delta {delta.seq} before any snapshot on this connection")
        if delta.base != base.seq:
            raise DeltaMismatch(f"delta {delta.seq} applies to frame {delta.base}, the last one here is "
                                f"{base.seq}")
        gpus = list(base.gpus)
        slots = self._slots
        for gd in delta.gpus:
            at = slots.get(gd.index)
            if at is None:
                raise DeltaMismatch(f"delta {delta.seq} names GPU {gd.index}, which the base does not have")
            old = gpus[at]
            procs = self._processes(old, gd, delta.seq, latest_start)
            _fill(gd, old, procs)
            gpus[at] = gd
        allocations = base.allocations if delta.allocations is None else delta.allocations
        snap = sample.Snapshot(proto=delta.proto, ts=delta.ts, seq=delta.seq, gpus=gpus,
                               allocations=allocations)
        self.snapshot = snap
        return snap

    def _processes(self, old: sample.GpuSample, gd: sample.GpuDelta, seq: int,
                   latest_start: float) -> list[sample.ProcessSample]:
        """The GPU's process list after ``gd``: the base's, its utilization updated, unless processes came,
        went or changed (then a new list, sharing the objects of the processes that did not)."""
        procs = old.processes
        if gd.pids is None and not gd.changed:
            if gd.util:  # the same processes, computing more or less: updated in place
                self._utilization(self._by_pid(procs), gd, seq)
            return procs
        by_pid = dict(self._by_pid(procs))
        if gd.changed:
            _start_bound(gd.changed, latest_start)
            for p in gd.changed:
                by_pid[p.pid] = p
        order = gd.pids if gd.pids is not None else [p.pid for p in procs]
        try:
            procs = [by_pid[pid] for pid in order]
        except KeyError as exc:
            raise DeltaMismatch(f"delta {seq}: GPU {gd.index} lists pid {exc.args[0]} without its "
                                f"record") from None
        by_pid = {p.pid: p for p in procs}
        self._pids.pop(id(old.processes), None)
        self._pids[id(procs)] = (procs, by_pid)
        if gd.util:
            self._utilization(by_pid, gd, seq)
        return procs

    @staticmethod
    def _utilization(by_pid: dict[int, sample.ProcessSample], gd: sample.GpuDelta, seq: int) -> None:
        for pid, sm, mu in gd.util or ():
            q = by_pid.get(pid)
            if q is None:
                raise DeltaMismatch(f"delta {seq}: GPU {gd.index} has no pid {pid} to update")
            q.sm_util, q.mem_util = sm, mu

    def _by_pid(self, procs: list[sample.ProcessSample]) -> dict[int, sample.ProcessSample]:
        known = self._pids.get(id(procs))
        if known is not None and known[0] is procs:
            return known[1]
        by_pid = {p.pid: p for p in procs}
        self._pids[id(procs)] = (procs, by_pid)
        return by_pid

    def _rebase(self, snap: sample.Snapshot) -> None:
        self.snapshot = snap
        self._slots = {g.index: i for i, g in enumerate(snap.gpus)}
        live = {id(g.processes) for g in snap.gpus}
        for key in [k for k in self._pids if k not in live]:
            del self._pids[key]
