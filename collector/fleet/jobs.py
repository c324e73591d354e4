"""Per-job efficiency records, as HPC centres' job reports have them: when a job releases its GPUs, one row
with its hosts, GPUs, held GPU-hours, mean and peak util, peak memory, waste share and the diagnoses seen.

A :class:`JobTracker` is a FleetSink (collector/fleet/live.py) next to the store and the alert engine. Per
snapshot, per GPU, each job holding memory on it (:func:`gpufleet.collector.model.jobkey.job_key`: Slurm job,
else container, else pid + start time) is charged what the GPU-hours accounting charges it
(collector/fleet/accounting.py, the one owner: the seconds by the sample's own time, held, wasted), so a
Slurm job has the same hours in its record as in the report; util is averaged over those seconds. The
diagnoses are the rules firing on the job's GPUs while it holds them (the alert engine's flags per GPU,
read at most once a second for the whole fleet).

A running Slurm job is also followed from the GPUs Slurm gave it (``Snapshot.allocations``), used or not:
its record lists them and their allocated and unused hours (accounting.allocation_charge), and a job that
runs no process on any of its GPUs has a record too.

Each ended job's record also goes to ``note`` when given (the daemon's end-of-job note to the user,
collector/notify/jobnotes.py, with ``alerting.job_notes``).

A job ends once no host has shown it for ``GONE_INTERVALS`` of that host's sampling intervals; a job on a
host that stops reporting altogether ends ``QUIET_AFTER`` seconds after its last sighting. State is in
memory and bounded by the jobs running now: a collector restart starts a running job's accounting afresh
(its ``started`` is still its processes' start time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from gpufleet.collector.fleet.accounting import GpuClock, allocation_charge, charge
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import AllocationUse
from gpufleet.collector.model.classify import UNATTRIBUTED, holds_memory, processes_unknown, user_of
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.jobkey import SLURM
from gpufleet.collector.model.procname import short_command
from gpufleet.collector.model.records import POD_FIELDS, JobRecord
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS

log = logging.getLogger(__name__)

GONE_INTERVALS: Final = 3
QUIET_AFTER: Final = 600.0
SWEEP_EVERY: Final = 10.0

FLAGS_EVERY: Final = 1.0

#: which rules fire where now (the alert engine's answer, collector/model/firing.py)
FiringNow = Callable[[], Firing]
Save = Callable[[list[JobRecord]], Awaitable[None]]
Note = Callable[[JobRecord], None]


@dataclass(slots=True)
class _Job:
    key: str
    user: str
    started: float
    command: str | None
    first_seen: float
    seen: dict[str, float] = field(default_factory=dict)  # host -> last snapshot that showed the job
    present: set[str] = field(default_factory=set)  # hosts still showing it (not gone for GONE_INTERVALS)
    gpus: set[tuple[str, int]] = field(default_factory=set)  # (host, GPU index)
    held: float = 0.0  # GPU-seconds
    util_seconds: float = 0.0  # sum of util * seconds over the held seconds with a util
    util_held: float = 0.0  # the held seconds that had a util
    wasted: float = 0.0
    peak_util: float | None = None
    peak_memory: int | None = None
    diagnoses: set[str] = field(default_factory=set)
    allocated: set[tuple[str, int]] = field(default_factory=set)  # (host, GPU index) Slurm gave the job
    allocated_seconds: float = 0.0  # GPU-seconds allocated to the running job (accounting.allocation_charge)
    unused_seconds: float = 0.0
    pod: tuple[str | None, str | None, str | None] | None = None  # namespace, name, container (kubelet's)

    def record(self) -> JobRecord:
        hosts = sorted(self.seen)
        return JobRecord(
            key=self.key, user=self.user, started=self.started, ended=max(self.seen.values()),
            hosts=hosts, gpus=[f"{h}:{i}" for h, i in sorted(self.gpus)], command=self.command,
            gpu_hours=self.held / 3600.0,
            mean_util=self.util_seconds / self.util_held if self.util_held else None,
            peak_util=self.peak_util, peak_memory=self.peak_memory,
            waste_pct=100.0 * self.wasted / self.held if self.held else None,
            diagnoses=sorted(self.diagnoses), gpus_allocated=[f"{h}:{i}" for h, i in sorted(self.allocated)],
            gpu_hours_allocated=self.allocated_seconds / 3600.0,
            gpu_hours_unused=self.unused_seconds / 3600.0,
            **dict(zip(POD_FIELDS, self.pod or (None, None, None), strict=True)))


class JobTracker:
    """Follows the jobs on the fleet's GPUs and saves each one's record when it ends."""

    def __init__(self, save: Save | None, *, firing: FiringNow | None = None,
                 intervals: dict[str, float] | None = None,
                 facts: FleetFacts | None = None, note: Note | None = None) -> None:
        self.save = save
        self.note = note
        self.firing = firing
        self.intervals = intervals or {}  # host -> sampling interval (default 1 s)
        #: a snapshot's job keys and waste, shared with the alert engine (whoever asks first works them out)
        self.facts = facts if facts is not None else FleetFacts(DEFAULT_THRESHOLDS)
        self.jobs: dict[str, _Job] = {}
        self._on_host: dict[str, set[str]] = {}  # host -> keys of the jobs it still shows (present)
        self.finished: list[JobRecord] = []  # every record handed to save (tests, metrics)
        #: (host, uuid) -> the GPU's accounting clock (by the samples' time), and when it last sampled (ours)
        self._clocks: dict[tuple[str, str], tuple[GpuClock, float]] = {}
        self._swept = 0.0
        self._fired = Firing()
        self._fired_at = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()

    # FleetSink
    def host_state(self, state: HostState) -> None:
        """Nothing: a host that goes down stops showing its jobs, which then end after QUIET_AFTER."""

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        try:
            if isinstance(frame, sample.Snapshot):
                self.observe(host, frame, received)
            if received - self._swept >= SWEEP_EVERY:
                self._swept = received
                self.sweep(received)
        except Exception:  # noqa: BLE001 - a sink never raises into the transport
            log.exception("job tracker failed on a frame from %s", host)

    def observe(self, host: str, snap: sample.Snapshot, now: float) -> None:
        if self.firing is not None and abs(now - self._fired_at) >= FLAGS_EVERY:
            self._fired, self._fired_at = self.firing(), now
        shown: set[str] = set()
        on_host = self._on_host.setdefault(host, set())
        facts = self.facts.of(host, snap)
        seconds_at: dict[int, float] = {}  # GPU index -> what its clock charged this sample
        for gf in facts.gpus:
            g = gf.gpu
            if g.error is None and processes_unknown(g):  # no evidence: the jobs here go on as they were
                for key in on_host:
                    job = self.jobs.get(key)
                    if job is not None and (host, g.index) in job.gpus:
                        shown.add(key)
                        job.seen[host] = now
                continue
            if g.error is not None:
                continue
            known = self._clocks.get((host, g.uuid))
            clock = known[0] if known is not None else GpuClock()
            self._clocks[(host, g.uuid)] = (clock, now)
            seconds = seconds_at[g.index] = clock.tick(snap.ts) or 0.0  # None: replayed or late: nothing
            # job -> the memory its processes hold here (and its first process): one pass, no list per job
            memory: dict[str, int] = {}
            first: dict[str, sample.ProcessSample] = {}
            jobs = gf.jobs
            for p in g.processes:
                if holds_memory(p):
                    key = jobs[p.pid]
                    held = memory.get(key)
                    if held is None:
                        first[key] = p
                    memory[key] = (held or 0) + (p.gpu_memory or 0)
            if not memory:
                continue
            charged = charge(host, g, seconds, gf.waste, jobs=jobs).jobs
            fired = self._fired.on(host, g.index)
            util = g.util_gpu
            where = (host, g.index)
            for key, mem_sum in memory.items():
                shown.add(key)
                job = self.jobs.get(key)
                if job is None:
                    job = self.jobs[key] = self._new_job(key, first[key], g, jobs, now)
                job.seen[host] = now
                job.present.add(host)
                on_host.add(key)
                job.gpus.add(where)
                if job.pod is None and first[key].pod_name:  # the kubelet's names may come a sample late
                    p = first[key]
                    job.pod = (p.pod_namespace, p.pod_name, p.container_name)
                if job.peak_memory is None or mem_sum > job.peak_memory:
                    job.peak_memory = mem_sum
                if util is not None and (job.peak_util is None or util > job.peak_util):
                    job.peak_util = float(util)
                if fired:
                    job.diagnoses |= fired
                hours = charged.get(key)
                if hours is not None:
                    job.held += hours[0]
                    job.wasted += hours[2]
                    if util is not None:
                        job.util_seconds += hours[0] * util
                        job.util_held += hours[0]
        if snap.allocations:
            self._allocations(host, facts.allocation_uses(), seconds_at, shown, on_host, now)
        gone_after = GONE_INTERVALS * self.intervals.get(host, 1.0)
        ended = []
        for key in [k for k in on_host if k not in shown]:
            job = self.jobs.get(key)
            if job is None:
                on_host.discard(key)
            elif now - job.seen[host] > gone_after:  # released its GPUs on this host
                job.present.discard(host)
                on_host.discard(key)
                if not job.present:
                    ended.append(job)
        self._end(ended)

    def _allocations(self, host: str, running: list[AllocationUse], seconds_at: dict[int, float],
                     shown: set[str], on_host: set[str], now: float) -> None:
        """The running Slurm jobs holding GPUs here, used or not: a job that runs no process on any GPU is a
        job too (its record says so), and every job is charged its allocated and unused hours."""
        for use in running:
            a = use.allocation
            key = f"{SLURM}{a.job}"
            job = self.jobs.get(key)
            if job is None:
                job = self.jobs[key] = _Job(key, a.user or UNATTRIBUTED, now, None, now)
            shown.add(key)
            job.seen[host] = now
            job.present.add(host)
            on_host.add(key)
            job.allocated.update((host, i) for i in use.allocated)
            for allocated, unused in allocation_charge(use, seconds_at).values():
                job.allocated_seconds += allocated
                job.unused_seconds += unused
            for index in use.unused:
                job.diagnoses |= self._fired.on(host, index)

    @staticmethod
    def _new_job(key: str, p: sample.ProcessSample, g: sample.GpuSample, jobs: dict[int, str],
                 now: float) -> _Job:
        """A job first seen now: its user and command from its first process on ``g``, started when the
        earliest of its processes there did."""
        starts = [q.start_time for q in g.processes
                  if q.start_time is not None and jobs[q.pid] == key and holds_memory(q)]
        return _Job(key, user_of(p), min(starts, default=now), short_command(p.command, 120), now)

    def sweep(self, now: float) -> None:
        """End the jobs whose hosts went quiet for QUIET_AFTER; drop the GPU clocks of quiet hosts."""
        for job in self.jobs.values():
            for host in [h for h in job.present if now - job.seen[h] > QUIET_AFTER]:
                job.present.discard(host)
                self._on_host.get(host, set()).discard(job.key)
        self._end([job for job in self.jobs.values() if not job.present])
        for key in [k for k, (_, seen) in self._clocks.items() if now - seen > QUIET_AFTER]:
            del self._clocks[key]

    def _end(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        records = []
        for job in jobs:
            del self.jobs[job.key]
            records.append(job.record())
        self.finished.extend(records)
        del self.finished[:-1000]  # bounded
        if self.note is not None:
            for record in records:
                try:
                    self.note(record)
                except Exception:  # noqa: BLE001 - a note never stops the records being saved
                    log.exception("could not note the end of job %s", record.key)
        if self.save is not None:
            task = asyncio.get_running_loop().create_task(self._save(records))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _save(self, records: list[JobRecord]) -> None:
        assert self.save is not None
        try:
            await self.save(records)
        except Exception as exc:  # noqa: BLE001 - the store raises its own alert; the records are logged
            log.warning("could not save %d job records: %s", len(records), exc)

    async def drain(self) -> None:
        """Wait for the records being saved (before the store closes)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
