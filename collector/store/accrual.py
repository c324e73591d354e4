"""The running totals per change: process spans and GPU-hours added up per GPU while its processes stay the
same, and handed to :class:`~gpufleet.collector.store.ingest.Totals` when they change, at an hour's end, and
before the totals are written (issue 33).

Why: a snapshot of 8 GPUs x 8 processes added each process to its span and charged each user, every
sample, for facts that change every hour. The stream's edge keeps a GPU's process list one object while its
processes stay the same but for their utilization (collector/transport/delta.py); for as long as it does, a
:class:`Stretch` holds what the list means for the totals (each process's span start, who is charged, whose
holding is waste when the GPU idles and when it does not) and each sample adds to it only the GPU's
seconds, util-weighted seconds and idle seconds, and its processes' SM utilization as one tuple (copied when
the sample arrived: the edge updates utilization in place). A hand-over adds the stretch's sums to every
span, user and Slurm job, which is what the per-sample charges would have added
(:func:`~gpufleet.collector.fleet.accounting.held_charge` of each sample: held seconds, used seconds, wasted
seconds when the holder wastes), summed in another order.

The ingest state hands every stretch over before the totals are written and before it forgets its GPUs
after a rollback, so nothing a committed or marked frame added is lost or added twice (store/ingest.py).
A GPU with no holder (empty, or orphaned memory, which is charged to nobody) adds its capacity per sample
and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpufleet.collector.fleet.accounting import Holding, held_charge, wasted_seconds, wastes
from gpufleet.collector.model import sample
from gpufleet.collector.model.jobkey import SLURM
from gpufleet.collector.store import slurm, usage

if TYPE_CHECKING:
    from gpufleet.collector.store.ingest import GpuState, Totals

SmRow = tuple[int | None, ...]  # one sample's SM utilization of each process on the GPU, in list order
_INT64: Final = (1 << 63) - 1


def int64(value: int | None) -> int | None:
    """SQLite integers are 64-bit; an absurd value from an agent becomes NULL instead of failing a batch."""
    if value is None or -_INT64 <= value <= _INT64:
        return value
    return None


@dataclass(slots=True)
class SpanAcc:
    """One process span's changes since the totals were last written, upserted then."""

    gpu_id: int
    pid: int
    start: float
    known: int
    host_id: int
    gpu_idx: int
    proc: sample.ProcessSample  # its record (attributes, memory)
    first: float
    last: float
    max_mem: int | None
    sm_sum: float
    sm_count: int
    sm_latest: int | None  # its SM utilization at ``last``

    def row(self) -> tuple[Any, ...]:
        """The values of store/ingest.py's SPAN_UPSERT."""
        p = self.proc
        return (self.gpu_id, self.pid, self.start, self.known, self.host_id, self.gpu_idx, p.user,
                int64(p.uid), p.command, p.kind, p.container, p.pod, p.job, int(p.attributed), p.state,
                self.first, self.last, int64(p.gpu_memory), int64(self.max_mem), int64(self.sm_latest),
                self.sm_sum, self.sm_count)


def add_span(spans: dict[tuple[int, int, float], SpanAcc], gs: GpuState, p: sample.ProcessSample,
             start: float, first: float, last: float, sms: Sequence[int | None]) -> None:
    """Add a process's samples from ``first`` to ``last`` (their SM utilization ``sms``) to its span."""
    known = 0 if p.start_time is None else 1
    key = (gs.id, p.pid, start)
    total = 0.0
    count = 0
    for sm in sms:
        if sm is not None:
            total += sm
            count += 1
    acc = spans.get(key)
    if acc is None:
        spans[key] = SpanAcc(gs.id, p.pid, start, known, gs.host_id, gs.idx, p, first, last, p.gpu_memory,
                             total, count, sms[-1] if sms else None)
        return
    acc.proc, acc.host_id, acc.gpu_idx = p, gs.host_id, gs.idx
    if last >= acc.last:
        acc.last, acc.sm_latest = last, sms[-1] if sms else acc.sm_latest
    mem = p.gpu_memory
    if mem is not None and (acc.max_mem is None or mem > acc.max_mem):
        acc.max_mem = mem
    acc.sm_sum += total
    acc.sm_count += count


@dataclass(slots=True)
class Stretch:
    """One GPU's samples while its process list stays the same object (module docstring)."""

    processes: list[sample.ProcessSample]
    starts: list[float]  # each process's span start
    host_id: int
    users: list[tuple[str, bool, bool]]  # who is charged: user, wastes when the GPU idles, otherwise
    jobs: list[tuple[str, bool, bool]]  # the same per Slurm job id
    slurm_procs: list[sample.ProcessSample]  # one process per Slurm job (its slurm_jobs row)
    # since the last hand-over
    first: float | None = None
    last: float = 0.0
    sms: list[SmRow] = field(default_factory=list)
    hour: int | None = None
    seconds: float = 0.0
    used: float = 0.0
    idle: float = 0.0

    @classmethod
    def open(cls, processes: list[sample.ProcessSample], starts: list[float], host_id: int, held: Holding,
             waste_idle: Sequence[str], waste_busy: Sequence[str]) -> Stretch:
        users = [(u, u in waste_idle, u in waste_busy) for u in held.users]
        jobs = [(key[len(SLURM):], wastes(who, waste_idle), wastes(who, waste_busy))
                for key, who in held.jobs.items() if key.startswith(SLURM)]
        by_job: dict[str, sample.ProcessSample] = {}
        for p in processes:
            if p.job is not None:
                by_job.setdefault(p.job, p)
        return cls(processes, starts, host_id, users, jobs, list(by_job.values()))

    def add(self, totals: Totals, gs: GpuState, ts: float, hour: int, sms: SmRow, seconds: float,
            util: int | None, idle: bool, charged: bool) -> None:
        """One sample (``hour``: usage.hour_of its time): its time and SM row always; its GPU-hours when
        ``charged`` (seconds > 0, no error) and someone holds the GPU (orphaned memory is nobody's)."""
        if self.first is None:
            self.first = ts
        self.last = ts
        self.sms.append(sms)
        if not charged or not self.users:
            return
        if hour != self.hour:
            self._hand_over_hours(totals, gs)
            self.hour = hour
        charge = held_charge(seconds, util, False)
        self.seconds += charge[0]
        self.used += charge[1]
        if idle:
            self.idle += seconds

    def hand_over(self, totals: Totals, gs: GpuState) -> None:
        """Add what the samples since the last hand-over add to the spans and GPU-hours."""
        if self.first is not None:
            spans = totals.spans
            columns: Sequence[Sequence[int | None]] = list(zip(*self.sms, strict=True)) \
                if self.processes else []
            for p, start, sms in zip(self.processes, self.starts, columns, strict=True):
                add_span(spans, gs, p, start, self.first, self.last, sms)
            self.first = None
            self.sms = []
        self._hand_over_hours(totals, gs)

    def _hand_over_hours(self, totals: Totals, gs: GpuState) -> None:
        if self.hour is None or not self.seconds and not self.used:
            self.seconds = self.used = self.idle = 0.0
            return
        seconds, used, idle = self.seconds, self.used, self.idle
        for user, waste_idle, waste_busy in self.users:
            usage.add(totals.usage, (self.hour, self.host_id, gs.id, user),
                      (seconds, used, wasted_seconds(seconds, idle, waste_idle, waste_busy)))
        for job, waste_idle, waste_busy in self.jobs:
            usage.add(totals.slurm_usage, (self.hour, self.host_id, gs.id, job),
                      (seconds, used, wasted_seconds(seconds, idle, waste_idle, waste_busy)))
        self.seconds = self.used = self.idle = 0.0


def note_jobs(seen: slurm.SlurmSeen, rows: dict[tuple[int, str], slurm.JobRow], stretch: Stretch,
              ts: float) -> None:
    """The stretch's Slurm jobs seen at ``ts`` (their slurm_jobs rows, when due)."""
    for p in stretch.slurm_procs:
        seen.note(rows, stretch.host_id, p, ts)


