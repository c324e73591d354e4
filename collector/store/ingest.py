"""Turning frames into rows: runs on the writer's thread, inside the writer's transaction.

:class:`IngestState` caches ids and per-GPU progress (newest sample time, typical interval, spans of
processes without a start time). It only ever reflects committed data plus the batch in progress; when a
batch rolls back the writer calls :meth:`IngestState.reset` and everything is re-read from the database, so
a retried batch is converted again from the same starting point (no double-counted usage).

Running totals -- process spans, GPU-hours (usage, per user and per Slurm job) and capacity -- are written
every ``accrue_interval`` seconds (60 by default; 0: with every batch, as before), not with every batch:
they are upserts of one row a process or GPU-user-hour, so written each batch (every 0.5 s at fleet scale)
they cost more than the samples, and written every 10 s they were still half the writer's work at 300 hosts
of 8 GPUs x 8 processes (issue 33: 64 span and 64 GPU-user upserts a host every interval). Between writes
they accumulate in :class:`Totals` (``IngestState.totals``) straight from each snapshot: no per-batch copy
to merge. A frame whose totals were added is marked (``FrameItem.accrued``); if its batch rolls back and it
is written again, it adds to a throwaway instead, so a retried batch adds nothing twice. A snapshot's
statements (ids, GPU registration, the span lookups) all run before it adds anything, so a write that fails
part-way through a snapshot has added none of it. The trade-off: a reader of the file sees spans and
GPU-hours up to ``accrue_interval`` late, and a crash (kill -9, power) loses at most that much of those
totals, never a sample. A flush someone awaits (:meth:`Store.flush`), a clean stop, and the store's own
reads of spans and GPU-hours (``Writer.write_totals`` first) write them. Per change (issue 33): while a
GPU's process list is one object, its samples are added up in a :class:`~.accrual.Stretch` and handed to the
totals when the list changes, at the hour, before the totals are written and before a rollback forgets the
GPU (:meth:`IngestState.settle`).

A sample older than or equal to the GPU's newest one (a replay, or late) is still stored (a sample already
stored at that time keeps its first writing) but adds nothing to process spans or usage, so replays are
idempotent. Samples go to the head (store/head.py: pending in memory, flushed every 2 s, compacted into
chunks), which also marks a minute already rolled up in ``rollup_dirty`` when it stores a late sample.

Except when the clock stepped back: a sample behind the newest whose receive time went back too starts a
new timeline (:class:`~gpufleet.collector.fleet.accounting.GpuClock` says how it is charged; the store tells
it what is already stored). A step is only seen while the collector runs (the receive time of the GPU's
previous sample is not stored): the first samples after a restart behind the newest stored one count as
late. A step forward is bounded by the gap cap like any gap.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from gpufleet.agent import wire
from gpufleet.collector.fleet.accounting import GpuClock, allocation_charge, holding
from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import AllocationUse, allocated_indexes, uses
from gpufleet.collector.model.classify import activity, holdings, is_free, waste_of
from gpufleet.collector.model.facts import GpuFacts, SnapshotFacts
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.settings import MAX_CLOCK_AHEAD
from gpufleet.collector.store import raw, slurm, usage
from gpufleet.collector.store.accrual import SmRow, SpanAcc, Stretch, int64, note_jobs
from gpufleet.collector.store.head import FLUSH_INTERVAL, Head
from gpufleet.collector.store.usage import CapacityKey, UsageKey

#: A process without a start time that vanishes for longer than this starts a new span when it returns.
NOSTART_GAP: Final = 60.0


@dataclass(slots=True)
class FrameItem:
    kind: str  # hello | snapshot | event | heartbeat
    host: str
    frame: sample.Frame
    received: float
    size: int = 0  # the writer's estimate of the memory it holds, computed once (0: not yet)
    #: the snapshot already classified on the loop (collector/model/facts.py, shared with the rules and the
    #: job tracker), so the GPU-hours accounting reads its waste instead of classifying it a second time
    facts: SnapshotFacts | None = None
    #: its running totals were added to ``IngestState.totals`` (a retry after a rollback adds nothing again)
    accrued: bool = False
    #: each GPU's processes' SM utilization when the snapshot arrived (the edge updates it in place later:
    #: collector/transport/delta.py); None: read from the processes (a frame no edge shares)
    sm: list[SmRow] | None = None


IngestItem: TypeAlias = FrameItem | HostRecord


@dataclass(slots=True)
class GpuState:
    id: int
    host_id: int
    idx: int
    name: str | None
    memory_total: int | None
    power_limit: float | None
    clock: GpuClock  # newest sample (committed or in this batch), typical interval: what a sample charges
    nostart: dict[int, list[float]] = field(default_factory=dict)  # pid -> [span start, last seen]
    stretch: Stretch | None = None  # its samples with the current process list, added up (store/accrual.py)


@dataclass(slots=True)
class Rows:
    """What one batch writes besides the statements run while converting (the running totals: Totals)."""

    samples: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)  # host id -> sample rows (head)
    gpu_last: dict[int, float] = field(default_factory=dict)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    host_seen: dict[int, float] = field(default_factory=dict)
    slurm_jobs: dict[tuple[int, str], slurm.JobRow] = field(default_factory=dict)  # (host_id, job) -> row


@dataclass(slots=True)
class Totals:
    """Running totals added since they were last written (module docstring; IngestState.accrue_interval)."""

    spans: dict[tuple[int, int, float], SpanAcc] = field(default_factory=dict)
    usage: dict[UsageKey, list[float]] = field(default_factory=dict)
    capacity: dict[CapacityKey, list[float]] = field(default_factory=dict)
    slurm_usage: dict[UsageKey, list[float]] = field(default_factory=dict)  # GPU-hours per Slurm job
    #: per Slurm job and GPU: seconds allocated to the running job, and of those unused (accounting.py)
    slurm_allocated: dict[UsageKey, list[float]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.spans or self.usage or self.capacity or self.slurm_usage or self.slurm_allocated)


#: Seconds between writes of the running totals (Tuning.accrue_interval; module docstring).
ACCRUE_INTERVAL: Final = 60.0


_i = int64  # an absurd integer from an agent: NULL, not a failed batch


# Every INSERT names its columns, so a later migration may add columns without breaking ingest.
PLACEMENT_INSERT: Final = ("INSERT OR REPLACE INTO gpu_placements (gpu_id, since, host_id, idx) "
                           "VALUES (?, ?, ?, ?)")
SPAN_UPSERT: Final = """
INSERT INTO processes (gpu_id, pid, start_time, start_known, host_id, gpu_idx, user, uid, command, kind,
    container, pod, job, attributed, state, first_seen, last_seen, gpu_memory, max_gpu_memory, sm_util,
    sm_sum, sm_count)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (gpu_id, pid, start_time) DO UPDATE SET
    host_id = excluded.host_id, gpu_idx = excluded.gpu_idx,
    user = coalesce(excluded.user, user), uid = coalesce(excluded.uid, uid),
    command = coalesce(excluded.command, command), kind = excluded.kind,
    container = coalesce(excluded.container, container), pod = coalesce(excluded.pod, pod),
    job = coalesce(excluded.job, job), attributed = max(attributed, excluded.attributed),
    state = excluded.state, gpu_memory = excluded.gpu_memory, sm_util = excluded.sm_util,
    first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen),
    max_gpu_memory = max(coalesce(max_gpu_memory, excluded.max_gpu_memory),
                         coalesce(excluded.max_gpu_memory, max_gpu_memory)),
    sm_sum = sm_sum + excluded.sm_sum, sm_count = sm_count + excluded.sm_count
"""
EVENT_INSERT: Final = ("INSERT OR IGNORE INTO events (host_id, ts, kind, message, gpu_index, uuid, xid, "
                       "received) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


class IngestState:
    """Id caches and per-GPU progress for the writer (single-threaded: only the writer's thread uses it)."""

    def __init__(self, params: Thresholds, accrue_interval: float = ACCRUE_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, head_interval: float = FLUSH_INTERVAL) -> None:
        self.params = params
        self.head = Head(head_interval, clock)  # raw samples on their way into chunks
        self.accrue_interval = accrue_interval
        self.totals = Totals()  # added up, not written yet
        self._clock = clock
        self._totals_at = float("-inf")  # when they were last written (the first batch writes them)
        self.hosts: dict[str, int] = {}
        self.gpus: dict[tuple[int, str], GpuState] = {}  # (host id, uuid): a GPU's identity
        self.slurm = slurm.SlurmSeen()

    def due(self, force: bool = False) -> bool:
        """Is it time to write the running totals with the batch being written (or ``force``: a flush)? Then
        every GPU's stretch is handed over to them first (store/accrual.py)."""
        if not force and self._clock() - self._totals_at < self.accrue_interval:
            return False
        self.settle()
        return bool(self.totals)

    def settle(self) -> None:
        """Hand every GPU's stretch over to the totals (what its samples added since the last time)."""
        for gs in self.gpus.values():
            if gs.stretch is not None:
                gs.stretch.hand_over(self.totals, gs)

    def written(self) -> None:
        """After the commit of a batch that wrote the totals: start adding up afresh."""
        self.totals = Totals()
        self._totals_at = self._clock()

    def reset(self) -> None:
        """Forget everything; used after a rollback so nothing refers to rows that no longer exist. The totals
        stay: what they hold of the rolled-back batch is marked on its frames (FrameItem.accrued), and so do
        the stretches' sums, handed over to them first."""
        self.settle()
        self.hosts.clear()
        self.gpus.clear()
        self.slurm.clear()

    # ------------------------------------------------------------------------------------- ids

    def host_id(self, conn: sqlite3.Connection, name: str) -> int:
        hid = self.hosts.get(name)
        if hid is None:
            conn.execute("INSERT INTO hosts (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (name,))
            hid = int(conn.execute("SELECT id FROM hosts WHERE name = ?", (name,)).fetchone()[0])
            self.hosts[name] = hid
        return hid

    def gpu(self, conn: sqlite3.Connection, host_id: int, info: sample.GpuSample | wire.GpuInfo,
            ts: float) -> GpuState:
        """The GPU's state, registering it or noting a move to another slot (same id, same history).

        Identity is (host, uuid): the same UUID from another host is another GPU, never merged."""
        gs = self.gpus.get((host_id, info.uuid))
        if gs is None:
            gs = self._load_gpu(conn, host_id, info, ts)
        if gs.idx != info.index:
            gs.idx = info.index
            conn.execute("UPDATE gpus SET idx = ? WHERE id = ?", (info.index, gs.id))
            conn.execute(PLACEMENT_INSERT,
                         (gs.id, ts, host_id, info.index))
        name, total, limit = info.name, _i(info.memory_total), info.power_limit
        if ((name is not None and name != gs.name) or (total is not None and total != gs.memory_total)
                or (limit is not None and limit != gs.power_limit)):
            gs.name = name if name is not None else gs.name
            gs.memory_total = total if total is not None else gs.memory_total
            gs.power_limit = limit if limit is not None else gs.power_limit
            conn.execute("UPDATE gpus SET name = ?, memory_total = ?, power_limit = ?, serial = "
                         "coalesce(?, serial), pci_bus_id = coalesce(?, pci_bus_id) WHERE id = ?",
                         (gs.name, gs.memory_total, gs.power_limit, info.serial, info.pci_bus_id, gs.id))
        return gs

    def _load_gpu(self, conn: sqlite3.Connection, host_id: int, info: sample.GpuSample | wire.GpuInfo,
                  ts: float) -> GpuState:
        row = conn.execute("SELECT id, host_id, idx, name, memory_total, power_limit FROM gpus "
                           "WHERE host_id = ? AND uuid = ?", (host_id, info.uuid)).fetchone()
        if row is None:
            cur = conn.execute(
                "INSERT INTO gpus (uuid, host_id, idx, name, serial, pci_bus_id, memory_total, power_limit, "
                "first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (info.uuid, host_id, info.index, info.name, info.serial, info.pci_bus_id,
                 _i(info.memory_total), info.power_limit, ts, ts))
            gid = int(cur.lastrowid or 0)
            conn.execute(PLACEMENT_INSERT,
                         (gid, ts, host_id, info.index))
            gs = GpuState(gid, host_id, info.index, info.name, _i(info.memory_total), info.power_limit,
                          GpuClock())
        else:
            last = self._newest(conn, host_id, int(row[0]))
            gs = GpuState(int(row[0]), int(row[1]), int(row[2]), row[3], row[4], row[5],
                          GpuClock(None if last is None else float(last)))
        self.gpus[(host_id, info.uuid)] = gs
        return gs

    def _newest(self, conn: sqlite3.Connection, host_id: int, gpu_id: int) -> float | None:
        """The GPU's newest stored (or pending) sample time; never one beyond what the stream lets in (a
        far-future time an old file may hold must not stop this GPU's accounting)."""
        bound = time.time() + MAX_CLOCK_AHEAD
        pending = self.head.newest_pending(gpu_id)
        hint = conn.execute("SELECT last_sample FROM gpus WHERE id = ?", (gpu_id,)).fetchone()[0]
        stored = hint if isinstance(hint, (int, float)) and hint <= bound else \
            raw.newest_stored(conn, host_id, gpu_id, bound)
        found = [t for t in (pending, stored) if t is not None and t <= bound]
        return float(max(found)) if found else None

    # ---------------------------------------------------------------------------------- frames

    def apply(self, conn: sqlite3.Connection, items: Iterable[IngestItem], rows: Rows) -> None:
        for item in items:
            if isinstance(item, HostRecord):
                self._host_state(conn, item)
                continue
            frame = item.frame
            if isinstance(frame, sample.Snapshot):
                self._snapshot(conn, item, frame, rows)
            elif isinstance(frame, wire.Event):
                hid = self.host_id(conn, item.host)
                rows.events.append((hid, frame.ts, frame.kind, frame.message, _i(frame.gpu_index),
                                    frame.uuid, _i(frame.xid), item.received))
            elif isinstance(frame, wire.Hello):
                self._hello(conn, item.host, frame, item.received)
            else:
                hid = self.host_id(conn, item.host)
                rows.host_seen[hid] = max(rows.host_seen.get(hid, item.received), item.received)

    def _host_state(self, conn: sqlite3.Connection, s: HostRecord) -> None:
        hid = self.host_id(conn, s.name)
        conn.execute(
            "UPDATE hosts SET status = ?1, reason = ?2, since = ?3, tags = ?4, "
            "last_seen = CASE WHEN ?5 IS NULL THEN last_seen ELSE max(coalesce(last_seen, ?5), ?5) END, "
            "agent_version = coalesce(?6, agent_version), driver_version = coalesce(?7, driver_version), "
            "nvml_version = coalesce(?8, nvml_version), cuda_version = coalesce(?9, cuda_version), "
            "reported_hostname = coalesce(?10, reported_hostname), backend = coalesce(?11, backend) "
            "WHERE id = ?12",
            (s.status, s.reason, s.since, json.dumps(s.tags), s.last_seen, s.agent_version, s.driver_version,
             s.nvml_version, s.cuda_version, s.reported_hostname, s.backend, hid))

    def _hello(self, conn: sqlite3.Connection, host: str, h: wire.Hello, received: float) -> None:
        hid = self.host_id(conn, host)
        conn.execute(
            "UPDATE hosts SET agent_version = ?, driver_version = ?, nvml_version = ?, cuda_version = ?, "
            "reported_hostname = ?, backend = ?, pid_namespace_ok = ?, hello_at = ?, "
            "last_seen = max(coalesce(last_seen, ?8), ?8) WHERE id = ?",
            (h.agent_version, h.driver_version, h.nvml_version, _i(h.cuda_version), h.hostname, h.backend,
             None if h.pid_namespace_ok is None else int(h.pid_namespace_ok), received, hid))
        for info in h.gpus:
            gs = self.gpu(conn, hid, info, h.ts)
            conn.execute("UPDATE gpus SET last_seen = max(last_seen, ?) WHERE id = ?", (h.ts, gs.id))

    def _snapshot(self, conn: sqlite3.Connection, item: FrameItem, snap: sample.Snapshot, rows: Rows) -> None:
        hid = self.host_id(conn, item.host)
        received = item.received
        seen = rows.host_seen.get(hid)
        rows.host_seen[hid] = received if seen is None or received > seen else seen
        ts = snap.ts
        append = rows.samples.setdefault(hid, []).append
        retry = item.accrued  # its totals were added before a rollback: this time they add nothing
        # first every statement the snapshot needs (a failure part-way must not have added anything) ...
        fresh: list[tuple[int, sample.GpuSample, GpuState, float]] = []
        opening: list[tuple[int, GpuState, sample.GpuSample, list[float]]] = []
        for i, g in enumerate(snap.gpus):
            gs = self.gpu(conn, hid, g, ts)
            reasons = g.throttle_reasons
            append((gs.id, ts, g.util_gpu, g.util_mem, g.memory_used, g.temperature, g.power_draw,
                    g.clock_sm, g.clock_mem, g.fan_speed, g.ecc_corrected, g.ecc_uncorrected,
                    ",".join(reasons) if reasons else None, g.error))
            seconds = gs.clock.tick(ts, received, self._stored(conn, hid, gs.id))
            if seconds is None:
                continue  # replayed or late: the sample row only (its first writing is kept)
            rows.gpu_last[gs.id] = ts
            if not retry and (gs.stretch is None or gs.stretch.processes is not g.processes):
                if gs.stretch is not None:  # its processes changed: what the old list added goes over
                    gs.stretch.hand_over(self.totals, gs)
                    self._seen_until(gs, gs.stretch)
                # each process's span start (one without a start time: looked up, hence now)
                starts = [p.start_time if p.start_time is not None
                          else self._nostart_start(conn, gs, p.pid, ts) for p in g.processes]
                opening.append((i, gs, g, starts))
            fresh.append((i, g, gs, seconds))
        item.accrued = True
        if retry:
            for _, g, _, _ in fresh:
                for p in g.processes:  # the batch's slurm_jobs rows went with the rollback
                    self.slurm.note(rows.slurm_jobs, hid, p, ts)
            if snap.allocations:
                self._allocations(self._running(snap, item.facts), ts, hid, 0, fresh, rows, None)
            return
        # ... then the running totals, once per frame (store/accrual.py)
        facts = item.facts
        # the loop's classification when it is this snapshot's under these thresholds; else worked out here
        shared = facts.gpus if facts is not None and facts.agrees(snap, self.params) else None
        for i, gs, g, starts in opening:
            gs.stretch = self._stretch(item.host, hid, g, starts, shared[i] if shared is not None else None)
        totals = self.totals
        hour = usage.hour_of(ts)
        sm = item.sm
        held = allocated_indexes(snap)  # GPUs running Slurm jobs hold: not free capacity, used or not
        for i, g, gs, seconds in fresh:
            stretch = gs.stretch
            assert stretch is not None
            charged = seconds > 0 and g.error is None
            kind = shared[i].activity if shared is not None else activity(g, self.params) if charged else None
            sms = sm[i] if sm is not None else tuple(p.sm_util for p in g.processes)
            stretch.add(totals, gs, ts, hour, sms, seconds, g.util_gpu, kind in ("idle", "stuck"), charged)
            if stretch.slurm_procs:
                note_jobs(self.slurm, rows.slurm_jobs, stretch, ts)
            if charged:  # orphaned memory (nobody holds it) is charged to nobody (accounting.py)
                usage.add_capacity(totals.capacity, (hour, hid, gs.id), seconds,
                                   is_free(g, self.params, g.index in held))
        if snap.allocations:
            self._allocations(self._running(snap, facts), ts, hid, hour, fresh, rows, totals)

    @staticmethod
    def _running(snap: sample.Snapshot, facts: SnapshotFacts | None) -> list[AllocationUse]:
        """The snapshot's running Slurm jobs' use of their GPUs (the loop's facts' answer when they are this
        snapshot's)."""
        return facts.allocation_uses() if facts is not None and facts.snapshot is snap else uses(snap)

    def _allocations(self, running: list[AllocationUse], ts: float, hid: int, hour: int,
                     fresh: Sequence[tuple[int, sample.GpuSample, GpuState, float]], rows: Rows,
                     totals: Totals | None) -> None:
        """The running Slurm jobs' allocated and unused seconds (accounting.allocation_charge), and what
        Slurm says of each job (a job that never runs a process on a GPU is named only here); ``totals``
        None: a retried frame, whose totals were added before the rollback (its rows only)."""
        seconds = {g.index: sec for _, g, _, sec in fresh if g.error is None}
        gpu_ids = {g.index: gs.id for _, g, gs, _ in fresh}
        for use in running:
            self.slurm.note_allocation(rows.slurm_jobs, hid, use.allocation, ts)
            if totals is None:
                continue
            for index, (allocated, unused) in allocation_charge(use, seconds).items():
                key = (hour, hid, gpu_ids[index], use.job)
                acc = totals.slurm_allocated.get(key)
                if acc is None:
                    totals.slurm_allocated[key] = [allocated, unused]
                else:
                    acc[0] += allocated
                    acc[1] += unused

    def _stored(self, conn: sqlite3.Connection, host_id: int, gpu_id: int) -> Callable[[float], bool]:
        """Whether a sample of this GPU at that time is already stored (a replay across a clock step)."""
        return lambda ts: self.head.stored(conn, host_id, gpu_id, ts)

    def _stretch(self, host: str, hid: int, g: sample.GpuSample, starts: list[float],
                 gf: GpuFacts | None) -> Stretch:
        """The stretch of the GPU's process list: who it charges and whose holding is waste (the facts'
        answers when the loop's classification is this snapshot's, else classify's worked out here)."""
        if gf is not None:
            r = gf.roster
            held, waste_idle, waste_busy = holding(host, g.processes, r.jobs), r.waste_idle, r.waste_busy
        else:
            who, zombies = holdings(g, self.params)
            held = holding(host, g.processes)
            waste_idle = waste_of("idle", who, zombies, self.params)
            waste_busy = waste_of(None, who, zombies, self.params)
        return Stretch.open(g.processes, starts, hid, held, waste_idle, waste_busy)

    def _seen_until(self, gs: GpuState, stretch: Stretch) -> None:
        """A stretch ended: its processes without a start time were last seen at its last sample, and those
        gone for NOSTART_GAP start a new span when they return."""
        if gs.nostart:
            for p in stretch.processes:
                entry = gs.nostart.get(p.pid)
                if entry is not None and p.start_time is None:
                    entry[1] = max(entry[1], stretch.last)
            stale = [pid for pid, (_, seen) in gs.nostart.items() if stretch.last - seen > NOSTART_GAP]
            for pid in stale:
                del gs.nostart[pid]

    def _nostart_start(self, conn: sqlite3.Connection, gs: GpuState, pid: int, ts: float) -> float:
        """Span start for a process with no start time: its first sighting, continued across restarts."""
        entry = gs.nostart.get(pid)
        if entry is not None and ts - entry[1] <= NOSTART_GAP:
            entry[1] = ts
            return entry[0]
        row = conn.execute(
            "SELECT start_time FROM processes WHERE gpu_id = ? AND pid = ? AND start_known = 0 "
            "AND last_seen >= ? AND last_seen <= ? ORDER BY last_seen DESC LIMIT 1",
            (gs.id, pid, ts - NOSTART_GAP, ts)).fetchone()
        start = float(row[0]) if row is not None else ts
        gs.nostart[pid] = [start, ts]
        return start


def write_rows(conn: sqlite3.Connection, rows: Rows) -> None:
    """The batch's bulk statements (executemany, prepared once each). Its samples (and the GPUs' newest
    sample times) go to the head, not here: the writer hands them over (Head.take)."""
    if rows.events:
        conn.executemany(EVENT_INSERT, rows.events)
    slurm.write_jobs(conn, rows.slurm_jobs)
    if rows.host_seen:
        conn.executemany("UPDATE hosts SET last_seen = max(coalesce(last_seen, ?1), ?1) WHERE id = ?2",
                         [(ts, hid) for hid, ts in rows.host_seen.items()])


def write_totals(conn: sqlite3.Connection, totals: Totals) -> None:
    """The running totals' upserts (they add to what the rows hold: write each Totals once; the caller
    settled the stretches first: IngestState.due)."""
    if totals.spans:
        conn.executemany(SPAN_UPSERT, [acc.row() for acc in totals.spans.values()])
    if totals.usage:
        conn.executemany(usage.UPSERT, usage.upsert_rows(totals.usage))
    if totals.capacity:
        conn.executemany(usage.CAPACITY_UPSERT, [(*k, v[0], v[1]) for k, v in totals.capacity.items()])
    slurm.write_usage(conn, totals.slurm_usage)
    slurm.write_allocated(conn, totals.slurm_allocated)
