"""The Store facade: what the daemon, the alert engine, the query API and the CLI call.

One writing connection driven by the writer task (see :mod:`writer`), one reading connection for every
read (WAL: reads see the last commit and never wait on the writer), both on aiosqlite threads. Opened
``readonly`` (the CLI when the collector is down) there is only the reading connection, opened with
``mode=ro``, and every write raises :class:`StorageError`.

The store is also a :class:`~gpufleet.collector.fleet.live.FleetSink` (``host_state`` / ``frame``), so the
daemon (and tests) can make it a listener of the live view directly.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

import aiosqlite
from gpufleet.agent import wire
from gpufleet.collector.errors import HistoryUnreadable, StorageError
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.records import (
    AlertRecord,
    CapacityRow,
    EventRow,
    GpuSeries,
    JobRecord,
    ProcessSpan,
    RawSeries,
    SilenceRecord,
    SlurmJobRow,
    SlurmUsageRow,
    UsageRow,
)
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpufleet.collector.model.views import HostRecord, MaintenanceRecord
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import jobs, maintenance, nflog, queries, rollup, schema, slurm, sweep
from gpufleet.collector.store._db import call, connect, is_corrupt, setup_reader, setup_writer, storage_error
from gpufleet.collector.store.guard import FileGuard, check_sidecars
from gpufleet.collector.store.head import FLUSH_INTERVAL
from gpufleet.collector.store.ingest import ACCRUE_INTERVAL, FrameItem, IngestState
from gpufleet.collector.store.shedding import Shedder
from gpufleet.collector.store.usage import capacity, usage_by_user
from gpufleet.collector.store.writer import Writer

log = logging.getLogger(__name__)
T = TypeVar("T")


#: The store queue holds at least this many snapshots, and QUEUE_PER_HOST a host (Tuning.for_fleet).
QUEUE_MIN: Final = 5000
QUEUE_PER_HOST: Final = 4
#: How long a read of spans / GPU-hours waits for the held totals to be written (Store._totals_current).
TOTALS_WAIT: Final = 5.0


@dataclass(slots=True, frozen=True)
class Tuning:
    """Knobs that are not user configuration (tests and the benchmark turn them)."""

    queue_max: int = QUEUE_MIN  # snapshots held in memory before the oldest are dropped
    queue_max_bytes: int = 256 << 20  # ... or this much memory (estimated) held by the queue
    retry_interval: float = 1.0  # seconds between retries while writes fail
    delete_batch: int = 5000  # rows per retention transaction
    rollup_grace: float = 10.0  # a minute is rolled up this long after it ends
    vacuum_slack: int = 1024  # free pages kept before incremental_vacuum shrinks the file
    close_timeout: float = 30.0
    #: Seconds between writes of process spans and GPU-hours (0: every batch). Readers see them up to this
    #: late; a crash loses at most this much of them, never samples (store/ingest.py).
    accrue_interval: float = ACCRUE_INTERVAL
    #: Seconds between flushes of the raw samples held in memory (store/head.py): a kill -9 loses at most
    #: this plus one batch of them.
    head_interval: float = FLUSH_INTERVAL

    @classmethod
    def for_fleet(cls, hosts: int) -> Tuning:
        """The daemon's tuning for ``hosts`` hosts: a queue of at least 4 snapshots a host, so a fleet of
        5,000 can ride out a few seconds of slow disk before shedding (a fixed 5,000 was one second of it)."""
        return cls(queue_max=max(QUEUE_MIN, QUEUE_PER_HOST * hosts))


class Store:
    """Use :meth:`open`; call ``submit_*`` from the event loop's thread only."""

    def __init__(self, path: Path, config: StorageConfig, reader: aiosqlite.Connection,
                 writer_conn: aiosqlite.Connection | None, writer: Writer | None, tuning: Tuning) -> None:
        self.path = path
        self.config = config
        self._reader = reader
        self._writer_conn = writer_conn
        self._writer = writer
        self._tuning = tuning
        self._policy = rollup.Policy(config.raw_retention, config.minute_retention, config.hour_retention,
                                     batch=tuning.delete_batch, grace=tuning.rollup_grace,
                                     vacuum_slack=tuning.vacuum_slack)
        self._closed = False
        #: Set by the daemon / alert engine to raise and resolve the "storage" alert: (healthy, error).
        self.on_health_change: Callable[[bool, str | None], None] | None = None
        #: ... and the "collector_overloaded" alert: (shedding, what it sheds).
        self.on_overload_change: Callable[[bool, str | None], None] | None = None
        #: Set by the daemon: each snapshot's one classification (shared with the rules and the job tracker),
        #: handed to the writer with the snapshot so its GPU-hours read the waste instead of reclassifying
        self.facts: FleetFacts | None = None
        self._guard: FileGuard | None = None  # the writing store's lock and file identity
        self._swept = False  # the first maintenance removes what an older version stored (store/sweep.py)
        self._unreadable_since: float | None = None  # when reads began failing (HistoryUnreadable.since)

    @classmethod
    async def open(cls, config: StorageConfig, *, readonly: bool = False, tuning: Tuning | None = None,
                   thresholds: Thresholds | None = None) -> Store:
        """Create the directory and migrate (unless ``readonly``), then start the writer task.

        ``thresholds``: the shared classification's thresholds (the rules' config) for GPU-hours accounting.
        """
        tuning = tuning or Tuning()
        path = config.resolved_path()
        where = str(path)
        writer_conn: aiosqlite.Connection | None = None
        reader: aiosqlite.Connection | None = None
        guard: FileGuard | None = None
        try:
            if readonly:
                if not path.exists():
                    raise StorageError(f"{where}: no database here (has the collector run yet?)")
                reader = await connect(path, readonly=True)
                await call(reader, setup_reader)
                await call(reader, schema.check_readable)
                return cls(path, config, reader, None, None, tuning)
            _create_private(path)
            guard = FileGuard(path)
            guard.acquire()  # one writing collector per file
            guard.remember_file()
            check_sidecars(path)
            writer_conn = await connect(path, readonly=False)
            await call(writer_conn, setup_writer)
            await call(writer_conn, schema.migrate)
            reader = await connect(path, readonly=False)
            await call(reader, setup_reader)
        except BaseException as exc:
            for conn in (reader, writer_conn):
                if conn is not None:
                    await conn.close()
            if guard is not None:
                guard.release()
            if isinstance(exc, (sqlite3.Error, OSError, StorageError)):
                raise storage_error(exc, where) from exc
            raise
        state = IngestState(thresholds or DEFAULT_THRESHOLDS, accrue_interval=tuning.accrue_interval,
                            head_interval=tuning.head_interval)
        store = cls(path, config, reader, writer_conn, None, tuning)
        store._guard = guard
        store._writer = Writer(writer_conn, where, state, max_rows=config.batch_max_rows,
                               max_delay=config.batch_max_delay, queue_max=tuning.queue_max,
                               retry_interval=tuning.retry_interval, on_health=store._health_changed,
                               shedder=Shedder(on_change=store._overload_changed),
                               queue_max_bytes=tuning.queue_max_bytes, check_file=store.check_file)
        store._writer.start()
        return store

    async def close(self) -> None:
        """Commit what is queued, stop the writer, close both connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._writer is not None:
                await self._writer.close(self._tuning.close_timeout)
        finally:
            await self._reader.close()
            if self._guard is not None:
                self._guard.release()
            if self._writer_conn is not None:
                await self._writer_conn.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------------------- health

    def _health_changed(self, ok: bool, message: str | None) -> None:
        callback = self.on_health_change
        if callback is not None:
            callback(ok, message)

    def _overload_changed(self, shedding: bool, message: str | None) -> None:
        callback = self.on_overload_change
        if callback is not None:
            callback(shedding, message)

    @property
    def shed(self) -> int:
        """Snapshots not stored because writes fell behind (shed evenly, one in k per host kept)."""
        return self._writer.shedder.total if self._writer is not None else 0

    @property
    def shed_by_host(self) -> dict[str, int]:
        return dict(self._writer.shedder.by_host) if self._writer is not None else {}

    @property
    def keep_one_in(self) -> int:
        """1 while every snapshot is stored; k while one in k per host is kept."""
        return self._writer.shedder.keep_one_in if self._writer is not None and self._writer.shedder.active \
            else 1

    @property
    def readonly(self) -> bool:
        return self._writer is None

    @property
    def healthy(self) -> bool:
        """False while writes are failing (disk full, I/O errors); reads keep working."""
        return self._writer.healthy if self._writer is not None else True

    @property
    def last_error(self) -> str | None:
        return self._writer.last_error if self._writer is not None else None

    @property
    def queue_depth(self) -> int:
        return self._writer.depth if self._writer is not None else 0

    @property
    def queue_bytes(self) -> int:
        """Estimated memory held by the write queue (bounded by ``Tuning.queue_max_bytes``)."""
        return self._writer.queued_bytes if self._writer is not None else 0

    @property
    def dropped(self) -> int:
        """Snapshots dropped because the queue was full (writes failing or too slow)."""
        return self._writer.dropped if self._writer is not None else 0

    @property
    def refused(self) -> int:
        """Frames and host records refused at the writer's entry: a time outside the store's window or an
        impossible value, whatever path they came by (store/admit.py; logged)."""
        return self._writer.refused if self._writer is not None else 0

    @property
    def rejected(self) -> int:
        """Frames that could not be written at all (logged), or lost at close while writes failed."""
        return self._writer.rejected if self._writer is not None else 0

    def _w(self) -> Writer:
        if self._writer is None:
            raise StorageError(f"{self.path}: store is open read-only")
        if self._closed:
            raise StorageError(f"{self.path}: store is closed")
        return self._writer

    # ----------------------------------------------------------------------------------- ingest

    def submit_hello(self, host: str, hello: wire.Hello, received: float) -> None:
        self._w().put(FrameItem("hello", host, hello, received))

    def submit_snapshot(self, host: str, snap: sample.Snapshot, received: float) -> None:
        facts = self.facts.of(host, snap) if self.facts is not None else None
        # the processes' SM utilization now: the stream's edge updates it in place with later samples
        sm = [tuple([p.sm_util for p in g.processes]) for g in snap.gpus]
        self._w().put(FrameItem("snapshot", host, snap, received, facts=facts, sm=sm))

    def submit_event(self, host: str, event: wire.Event, received: float) -> None:
        self._w().put(FrameItem("event", host, event, received))

    def submit_heartbeat(self, host: str, beat: sample.Heartbeat, received: float) -> None:
        """Only moves the host's last_seen."""
        self._w().put(FrameItem("heartbeat", host, beat, received))

    def submit_host_state(self, state: HostState) -> None:
        self._w().put(state.record())

    async def flush(self) -> None:
        """Return once everything submitted so far is committed; StorageError/StorageFull if it cannot be."""
        await self._w().flush()

    # FleetSink: never raises (a store problem must not break ingest for the other sinks)
    def host_state(self, state: HostState) -> None:
        try:
            self.submit_host_state(state)
        except StorageError as exc:
            log.warning("%s", exc)

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        try:
            if isinstance(frame, sample.Snapshot):
                self.submit_snapshot(host, frame, received)
            elif isinstance(frame, wire.Event):
                self.submit_event(host, frame, received)
            elif isinstance(frame, wire.Hello):
                self.submit_hello(host, frame, received)
            else:
                self.submit_heartbeat(host, frame, received)
        except StorageError as exc:
            log.warning("%s", exc)

    # ------------------------------------------------------------------------------------ reads

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Every read. A failure is :class:`HistoryUnreadable`, with the time reads began failing (kept
        until a read succeeds while writes work, so "since" does not move while the file stays damaged)."""
        if self._closed:
            raise StorageError(f"{self.path}: store is closed")
        try:
            result: T = await call(self._reader, fn)
        except (sqlite3.Error, OSError) as exc:
            if is_corrupt(exc) and self._writer is not None:  # reads see it first: say so, fire storage
                self._writer.set_fault(f"the database file is damaged ({exc}); restore it from a backup")
            if self._unreadable_since is None:
                self._unreadable_since = time.time()
            raise HistoryUnreadable(str(storage_error(exc, str(self.path))),
                                    since=self._unreadable_since) from exc
        if self._unreadable_since is not None and self.healthy:
            self._unreadable_since = None
        return result

    async def hosts(self) -> list[HostRecord]:
        return await self._read(queries.hosts)

    async def latest(self, host: str | None = None) -> dict[str, sample.Snapshot]:
        """Each host's last stored snapshot: the newest sample per GPU with the processes seen in it."""
        return await self._read(partial(queries.latest, host=host))

    async def gpu_history(self, host: str, *, gpu: int | None = None, since: float, until: float,
                          max_points: int = 500) -> list[GpuSeries]:
        """Per-GPU series at raw / 1m / 1h resolution so each has about ``max_points`` points at most."""
        return await self._read(partial(queries.gpu_history, host=host, gpu=gpu, since=since, until=until,
                                        max_points=max_points))

    async def raw_history(self, host: str, *, gpu: int, since: float, until: float) -> list[RawSeries]:
        """Every raw sample of one GPU in [since, until] as columns (ts, util, mem_used, temp, power): a 1 s
        chart of up to an hour (an hour of one GPU reads in a few ms). What the head has not flushed yet
        (at most its interval, 2 s) is not in it; :meth:`flush` first when that matters."""
        return await self._read(partial(queries.raw_history, host=host, gpu=gpu, since=since, until=until))

    async def fleet_history(self, *, since: float, until: float, max_points: int = 120) -> list[GpuSeries]:
        """Every GPU's series over the range (:meth:`gpu_history` host by host, in one read): the web page's
        fleet chart (busy, idle, wasted GPUs over time) is counted from them."""
        return await self._read(partial(queries.fleet_history, since=since, until=until,
                                        max_points=max_points))

    async def _totals_current(self) -> None:
        """Before reading spans or GPU-hours: have the writer write the running totals it holds (they are
        written every ``accrue_interval`` otherwise). Writes failing or slow: read what is written."""
        if self._writer is None or not self._tuning.accrue_interval:
            return
        try:
            await asyncio.wait_for(self._writer.write_totals(), TOTALS_WAIT)
        except (StorageError, asyncio.TimeoutError) as exc:
            log.debug("%s: reading spans / GPU-hours without the last held totals: %s", self.path, exc)

    async def process_history(self, host: str | None = None, *, gpu: int | None = None,
                              user: str | None = None, since: float, until: float) -> list[ProcessSpan]:
        await self._totals_current()
        return await self._read(partial(queries.process_history, host=host, gpu=gpu, user=user, since=since,
                                        until=until))

    async def usage_by_user(self, *, since: float, until: float, host: str | None = None,
                            by_host: bool = False, gpu: int | None = None) -> list[UsageRow]:
        """GPU-hours held / used / wasted per user (hour granularity: the range widens to whole hours)."""
        await self._totals_current()
        return await self._read(partial(usage_by_user, since=since, until=until, host=host, by_host=by_host,
                                        gpu=gpu))

    async def capacity(self, *, since: float, until: float, host: str | None = None) -> list[CapacityRow]:
        """GPU-hours observed and free per host (hour granularity, like usage_by_user)."""
        await self._totals_current()
        return await self._read(partial(capacity, since=since, until=until, host=host))

    async def slurm_usage(self, group: str, *, since: float, until: float,
                          host: str | None = None) -> list[SlurmUsageRow]:
        """GPU-hours per Slurm account or partition (hour granularity, like usage_by_user)."""
        await self._totals_current()
        return await self._read(partial(slurm.usage_by, group=group, since=since, until=until, host=host))

    async def slurm_jobs(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], SlurmJobRow]:
        """What Slurm said of these (host, job id) pairs, as last stored."""
        return await self._read(partial(slurm.jobs_of, keys=keys))

    async def events(self, *, host: str | None = None, since: float, until: float) -> list[EventRow]:
        return await self._read(partial(queries.events, host=host, since=since, until=until))

    # -------------------------------------------------------------------------- alerts, silences

    async def save_alerts(self, alerts: list[AlertRecord]) -> None:
        """Upsert by fingerprint; returns once committed (StorageFull while the disk is full: not retried)."""
        if alerts:
            records = list(alerts)
            await self._w().call(partial(queries.save_alerts, alerts=records))

    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[AlertRecord]:
        """Active = pending | firing; ``active_only=False`` adds resolved ones (resolved_at >= since)."""
        return await self._read(partial(queries.load_alerts, active_only=active_only, since=since))

    async def add_silence(self, silence: SilenceRecord) -> int:
        created = silence.created_at or time.time()
        record = SilenceRecord(matchers=dict(silence.matchers), starts_at=silence.starts_at,
                               ends_at=silence.ends_at, created_by=silence.created_by,
                               comment=silence.comment, created_at=created)
        result: int = await self._w().call(partial(queries.add_silence, s=record))
        return result

    async def list_silences(self, *, include_expired: bool = False,
                            now: float | None = None) -> list[SilenceRecord]:
        at = time.time() if now is None else now
        return await self._read(partial(queries.list_silences, include_expired=include_expired, now=at))

    async def expire_silence(self, silence_id: int, now: float) -> bool:
        """End a silence now; False if there is no such silence or it had already ended."""
        result: bool = await self._w().call(partial(queries.expire_silence, silence_id=silence_id, now=now))
        return result

    async def add_maintenance(self, rec: MaintenanceRecord) -> int:
        """Persist a maintenance window; returns its id (collector/maintenance.py)."""
        result: int = await self._w().call(partial(maintenance.add, rec=rec))
        return result

    async def list_maintenance(self, *, include_ended: bool = False,
                               now: float | None = None) -> list[MaintenanceRecord]:
        at = time.time() if now is None else now
        return await self._read(partial(maintenance.listing, include_ended=include_ended, now=at))

    async def end_maintenance(self, window_id: int, now: float) -> bool:
        """End a maintenance window now; False if there is no such window or it had already ended."""
        result: bool = await self._w().call(partial(maintenance.end, window_id=window_id, now=now))
        return result

    async def save_nflog(self, rows: list[nflog.NflogRecord], *, prune_before: float | None = None) -> None:
        """Upsert notification-log rows (collector/notify/nflog.py); delivered rows older than
        ``prune_before`` go."""
        def run(conn: sqlite3.Connection) -> None:
            nflog.save(conn, rows)
            if prune_before is not None:
                nflog.prune(conn, before=prune_before)

        await self._w().call(run)

    async def load_nflog(self, *, since: float) -> list[nflog.NflogRecord]:
        return await self._read(partial(nflog.load, since=since))

    async def save_jobs(self, records: list[JobRecord]) -> None:
        """Per-job efficiency records (collector/fleet/jobs.py); a job saved again replaces its row."""
        if records:
            await self._w().call(partial(jobs.save, records=list(records)))

    async def jobs(self, *, since: float, until: float, user: str | None = None,
                   limit: int = 1000) -> list[JobRecord]:
        """Jobs that ended in the range, newest first."""
        return await self._read(partial(jobs.load, since=since, until=until, user=user, limit=limit))

    # ------------------------------------------------------------------------------ maintenance

    def check_file(self) -> str | None:
        """Is the file at ``path`` still the one being written? If not, the store turns unhealthy for good
        (``storage`` fires) and the reason is logged; returns it. The writer task runs it with its commits
        (and once a second when idle): one stat of the path."""
        problem = self._guard.problem() if self._guard is not None else None
        if problem is not None and self._writer is not None and self._writer.fault is None:
            log.error("%s: %s", self.path, problem)
            self._writer.set_fault(problem)
        return problem

    async def run_maintenance(self, now: float) -> None:
        """Rollups, retention, vacuum, unused GPU rows: small transactions; then a passive WAL checkpoint.

        The daemon calls it every minute; ingest keeps flowing between the steps.
        """
        writer = self._w()
        self.check_file()
        if not self._swept:
            await writer.call(partial(sweep.sweep, now=time.time()), standalone=True)  # the store's clock
            self._swept = True
        policy = self._policy
        # every minute the rollups will read is compacted into its chunk first (hosts gone silent too)
        await writer.compact(rollup.minute_boundary(now, policy))
        for step in rollup.STEPS:
            def run(conn: sqlite3.Connection, step: rollup.Step = step) -> bool:
                return step(conn, now, policy)

            while await writer.call(run, standalone=True):
                pass

        def prune(conn: sqlite3.Connection) -> bool:
            pruned = rollup.delete_gpus(conn, now, policy)
            writer.forget_gpus(pruned)
            return len(pruned) >= policy.batch

        while await writer.call(prune, standalone=True):
            pass
        await self.checkpoint()

    async def checkpoint(self) -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(PASSIVE)``: (busy, frames in the WAL, frames checkpointed)."""
        result: tuple[int, int, int] = await self._w().call(rollup.checkpoint, standalone=True)
        return result


#: History holds user names and command lines: owner read-write, the group (operators who may use the
#: CLI's read-only fallback) read-only, nobody else. SQLite gives the -wal/-shm files the same mode.
DB_FILE_MODE = 0o640
DB_DIR_MODE = 0o750


def _create_private(path: Path) -> None:
    """Create the database directory and an empty file with restrictive modes (the umask may be 022)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=DB_DIR_MODE, parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, DB_FILE_MODE)
        os.close(fd)
        os.chmod(path, DB_FILE_MODE)  # the umask may have removed bits we wanted; never adds any
