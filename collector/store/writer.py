"""The one writer task: a bounded in-memory queue, batched transactions, and health on write failure.

Ingest calls only append to a deque (never block, never await), after :mod:`admit` has looked at each
frame and host record: what it refuses (a time far from the store's clock, an impossible value) is counted
(``refused``), logged (once a minute per host) and never queued. The task takes a batch (up to
``batch_max_rows`` GPU samples, or whatever arrived within ``batch_max_delay``; at once when someone awaits a
flush or a write) and commits it in one ``BEGIN IMMEDIATE`` transaction on its own aiosqlite thread.

The queue is full at ``queue_max`` snapshots or at ``queue_max_bytes`` (an estimate of what its items hold
in memory: 1,000 hosts of 10,000 GPUs fill it in far fewer snapshots than 1,000 hosts of 8), whichever
comes first. Before it fills, snapshots are shed evenly (one in k per host kept, see :mod:`shedding`),
counted and marked; when it is still over, the oldest *snapshot* is dropped and counted. Hellos, events,
host states, alerts and silences are never shed or dropped (the transport's per-host budgets bound what
events can cost).

A write that fails for a reason that may pass (SQLITE_FULL / ENOSPC, I/O error, lock held too long) is
rolled back, its frames go back to the front of the queue (so the queue bound still applies), everyone
awaiting a flush or a write gets :class:`StorageFull` / :class:`StorageError` (awaited writes are not retried:
their caller decides), the store turns unhealthy, and the batch is retried every ``retry_interval`` (at
once if someone awaits). The first commit that succeeds turns it healthy again. A batch that fails for a
reason that will not pass (a bug, a bad value) is retried frame by frame and only the bad frames are dropped.

The file guard (``check_file``: is the file at the path still the one being written? a stat) runs with the
task: after every commit, and every ``GUARD_INTERVAL`` while there is nothing to write, so a database file
deleted or replaced under the collector raises ``storage`` within seconds, not at the next maintenance.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias

import aiosqlite
from gpufleet.agent import wire
from gpufleet.collector.errors import StorageError
from gpufleet.collector.model import sample
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.store import admit
from gpufleet.collector.store._db import call, in_tx, is_transient, rollback, storage_error
from gpufleet.collector.store.ingest import FrameItem, IngestItem, IngestState, Rows, write_rows, write_totals
from gpufleet.collector.store.shedding import Shedder

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FlushItem:
    future: asyncio.Future[None]


@dataclass(slots=True)
class JobItem:
    """A write someone awaits. ``standalone`` jobs run alone and manage their own transaction(s)."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    standalone: bool = False


Item: TypeAlias = FrameItem | HostRecord | FlushItem | JobItem


#: Seconds between two log lines about one host's refused frames (the count goes on).
REFUSAL_LOG_INTERVAL = 60.0
#: Seconds between file guard checks while nothing is written (after every commit otherwise).
GUARD_INTERVAL = 1.0


@dataclass(slots=True)
class _Failed:
    exc: BaseException


def _is_snapshot(item: Item) -> bool:
    return isinstance(item, FrameItem) and item.kind == "snapshot"


def _weight(item: Item) -> int:
    if isinstance(item, FrameItem) and isinstance(item.frame, sample.Snapshot):
        return max(1, len(item.frame.gpus))
    return 1


#: Rough bytes a queued item holds (Python objects, not JSON): enough to bound memory, cheap to compute.
#: A snapshot's facts (collector/model/facts.py) ride with it: about half as much again as the frame (its
#: per-GPU holders, jobs and groups, and each process's identity and keys); tests/store/test_queue_estimate.py
#: measures both against tracemalloc. A GPU's process list the writer took with the host's previous
#: snapshot is the same object (collector/transport/delta.py): held once, counted once (ProcessLists). A
#: process in a Slurm job holds its job's id, name, user, account, partition and state too (_JOB more).
_ITEM, _GPU, _PROC, _JOB = 200, 1000, 600, 300
_FACTS_GPU, _FACTS_PROC = 500, 300

#: (host, GPU index) -> the process list the writer last took for it
ProcessLists: TypeAlias = dict[tuple[str, int], list[sample.ProcessSample]]


def _size(item: Item) -> int:
    """The estimate; a frame's is computed once and kept on it (an item is counted in and out of the queue,
    and again when a failed batch goes back)."""
    if isinstance(item, FrameItem):
        if not item.size:
            item.size = _estimate(item.frame, item.facts is not None)
        return item.size
    return _ITEM


def _estimate(frame: sample.Frame, with_facts: bool = False, host: str | None = None,
              taken: ProcessLists | None = None) -> int:
    """The bytes a queued frame holds by the writer's reckoning, with its snapshot facts or without; a GPU's
    processes count only when ``taken`` (with ``host``) does not hold their list already."""
    if isinstance(frame, sample.Snapshot):
        gpu, proc = (_GPU + _FACTS_GPU, _PROC + _FACTS_PROC) if with_facts else (_GPU, _PROC)
        total = _ITEM
        for g in frame.gpus:
            total += gpu
            if taken is None or taken.get((host or "", g.index)) is not g.processes:
                total += proc * len(g.processes) + sum(len(p.command or "") + (_JOB if p.job else 0)
                                                       for p in g.processes)
        return total
    if isinstance(frame, wire.Event):
        return _ITEM + len(frame.message)
    if isinstance(frame, wire.Hello):
        return _ITEM + _GPU * len(frame.gpus)
    return _ITEM


def _resolve(fut: asyncio.Future[Any], result: Any = None) -> None:
    if fut.done():
        return
    if isinstance(result, _Failed):
        fut.set_exception(result.exc)
    else:
        fut.set_result(result)


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _write_batch(conn: sqlite3.Connection, state: IngestState, items: Sequence[IngestItem],
                 jobs: Sequence[Callable[[sqlite3.Connection], Any]], totals: bool = False,
                 seal: bool = False) -> list[Any]:
    """One transaction: the frames' rows, then each awaited write in its own savepoint. The running totals
    go with it when they are due or ``totals`` (a flush, a clean stop): see :mod:`ingest`; so do the head's
    pending samples (store/head.py), and with ``seal`` (a clean stop) every minute is compacted."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = Rows()
        state.apply(conn, items, rows)
        write_rows(conn, rows)
        head = state.head
        head.take(rows.samples, rows.gpu_last)
        if seal:  # every minute at once: the head learns what a flush did only at commit, so a second
            head.flush(conn, before=float("inf"), budget=None)  # flush here would redo the first's minutes
        elif head.due(force=totals):
            head.flush(conn)
        due = state.due(force=totals)
        if due:
            write_totals(conn, state.totals)
        results: list[Any] = []
        for fn in jobs:
            conn.execute("SAVEPOINT job")
            try:
                results.append(fn(conn))
                conn.execute("RELEASE job")
            except Exception as exc:  # noqa: BLE001 - one bad write must not sink the batch
                if is_transient(exc):
                    raise
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
                results.append(_Failed(exc))
        conn.execute("COMMIT")
        head.committed()
        if due:
            state.written()
        return results
    except BaseException:
        rollback(conn)
        state.head.rolled_back()
        state.reset()
        raise


def _compact(conn: sqlite3.Connection, state: IngestState, before: float) -> bool:
    """Maintenance: compact every head minute ending by ``before`` (hosts gone silent too), one budget of
    them per transaction; True while more are left."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        more = state.head.flush(conn, before=before)
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        state.head.rolled_back()
        raise
    state.head.committed()
    return more


def _shrink(conn: sqlite3.Connection) -> None:
    """Every free page back to the file system (auto_vacuum=INCREMENTAL, store/schema.py)."""
    conn.executescript("PRAGMA incremental_vacuum")


def _probe_write(conn: sqlite3.Connection) -> None:
    """A tiny real write: tells whether writes work again when nothing else is waiting."""
    in_tx(conn, partial(conn.execute, "INSERT OR REPLACE INTO meta (key, value) VALUES ('writer_probe', ?)",
                        (time.time(),)))


class Writer:
    """Owns the writing connection. Use from the event loop's thread only."""

    def __init__(self, conn: aiosqlite.Connection, where: str, state: IngestState, *, max_rows: int,
                 max_delay: float, queue_max: int, retry_interval: float,
                 on_health: Callable[[bool, str | None], None], shedder: Shedder | None = None,
                 queue_max_bytes: int = 256 << 20, clock: Callable[[], float] = time.time,
                 check_file: Callable[[], object] | None = None) -> None:
        self._conn = conn
        self._where = where
        self._state = state
        self._max_rows = max(1, max_rows)
        self._max_delay = max(0.0, max_delay)
        self._queue_max = max(1, queue_max)
        self._queue_max_bytes = max(1, queue_max_bytes)
        self._bytes = 0  # estimated memory held by the queued items (_size)
        self._taken: ProcessLists = {}  # each GPU's process list of the host's last snapshot taken
        self._retry = max(0.01, retry_interval)
        self._on_health = on_health
        self.shedder = shedder if shedder is not None else Shedder()
        self._next_due = 0.0  # monotonic time of the next look for gap markers to store
        self._q: deque[Item] = deque()
        self._snapshots = 0
        self._weight = 0
        self._awaited = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._clock = clock  # the store's own clock: the window admit.refusal checks times against
        self._check_file = check_file  # the file guard (module docstring)
        self._refusals_logged: dict[str, float] = {}  # host -> when its last refusal was logged
        self.refused = 0  # frames and host records admit.refusal turned away (never queued)
        self.dropped = 0  # snapshots dropped because the queue was full
        self.rejected = 0  # frames dropped because they could not be written at all
        self.commits = 0
        self.healthy = True
        self.last_error: str | None = None
        #: a problem writes cannot cure (the file deleted or replaced): healthy stays False until restart
        self.fault: str | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gpufleet-store-writer")

    @property
    def depth(self) -> int:
        return len(self._q)

    def forget_gpus(self, keys: Sequence[tuple[int, str]]) -> None:
        """GPU rows retention deleted, as (host id, uuid): dropped from the id cache (call on the writer's
        thread, in a job)."""
        for key in keys:
            self._state.gpus.pop(key, None)

    @property
    def queued_bytes(self) -> int:
        """Estimated memory held by the queue (what ``queue_max_bytes`` bounds)."""
        return self._bytes

    def _fill(self) -> float:
        """How full the queue is, 0..1 (and over): by snapshots or by estimated bytes, the fuller."""
        return max(self._snapshots / self._queue_max, self._bytes / self._queue_max_bytes)

    def _over(self) -> bool:
        return self._snapshots > self._queue_max or self._bytes > self._queue_max_bytes

    # ------------------------------------------------------------------------------------ queue

    def put(self, item: Item) -> None:
        if self._closing:
            raise StorageError(f"{self._where}: store is closed")
        if isinstance(item, (FrameItem, HostRecord)):
            why = admit.refusal(item, self._clock(), self._taken)
            if why is not None:
                self._refuse(item, why)
                return
        if isinstance(item, FrameItem) and isinstance(item.frame, sample.Snapshot):
            item.size = _estimate(item.frame, item.facts is not None, item.host, self._taken)
            for g in item.frame.gpus:
                self._taken[(item.host, g.index)] = g.processes
        if isinstance(item, FrameItem) and item.kind == "snapshot":
            if not self.shedder.admit(item.host, self._fill(), item.frame.ts):
                self._mark_gaps()
                return
            self._mark_gaps()
        self._q.append(item)
        self._count(item, 1)
        if self._over():
            self._trim()
        self._wake.set()

    async def call(self, fn: Callable[[sqlite3.Connection], Any], *, standalone: bool = False) -> Any:
        """Run ``fn`` on the writing connection, in order with ingest; returns once it is committed."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.put(JobItem(fn, fut, standalone))
        return await fut

    async def write_totals(self) -> None:
        """Write the held running totals (see :mod:`ingest`) with the next batch, ahead of whatever is queued:
        what readers of spans and GPU-hours ask this collector is current without waiting for a long queue."""
        if self._closing:
            raise StorageError(f"{self._where}: store is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = FlushItem(fut)
        self._q.appendleft(item)
        self._count(item, 1)
        self._wake.set()
        await fut

    async def flush(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.put(FlushItem(fut))
        await fut

    def _refuse(self, item: FrameItem | HostRecord, why: str) -> None:
        """Count a refused item; log it, at most once a minute per host (a broken source repeats itself)."""
        self.refused += 1
        host = item.host if isinstance(item, FrameItem) else item.name
        now = time.monotonic()
        last = self._refusals_logged.get(host)
        if last is None or now - last >= REFUSAL_LOG_INTERVAL:
            self._refusals_logged[host] = now
            what = item.kind if isinstance(item, FrameItem) else "host record"
            log.warning("%s: refused a %s from %s (%d refused in all): %s", self._where, what, host,
                        self.refused, why)

    def _mark_gaps(self) -> None:
        """Queue the shedder's gap markers (events: never shed); looked at no more than once a second."""
        now = time.monotonic()
        if now < self._next_due:
            return
        self._next_due = now + 1.0
        for host, event in self.shedder.due():
            self._q.append(FrameItem("event", host, event, event.ts))
            self._count(self._q[-1], 1)

    def _count(self, item: Item, sign: int) -> None:
        self._weight += sign * _weight(item)
        self._bytes += sign * _size(item)
        if _is_snapshot(item):
            self._snapshots += sign
        elif isinstance(item, (FlushItem, JobItem)):
            self._awaited += sign

    def _trim(self) -> None:
        """Drop the oldest snapshots until the bounds hold (never any other kind of item)."""
        while self._over():
            for i, item in enumerate(self._q):
                if _is_snapshot(item):
                    del self._q[i]
                    self._count(item, -1)
                    self.dropped += 1
                    break
            else:
                return

    def _take(self) -> list[Item]:
        first = self._q[0]
        if isinstance(first, JobItem) and first.standalone:
            self._q.popleft()
            self._count(first, -1)
            return [first]
        batch: list[Item] = []
        weight = 0
        while self._q and weight < self._max_rows:
            item = self._q[0]
            if isinstance(item, JobItem) and item.standalone:
                break
            self._q.popleft()
            self._count(item, -1)
            batch.append(item)
            weight += _weight(item)
        return batch

    def _requeue(self, items: Sequence[IngestItem]) -> None:
        for item in reversed(items):
            self._q.appendleft(item)
            self._count(item, 1)
        self._trim()

    def _fail_queued_awaited(self, exc: BaseException) -> None:
        """While writes fail nobody should wait for a retry: every queued flush / write gets the error."""
        if not self._awaited:
            return
        keep: deque[Item] = deque()
        for item in self._q:
            if isinstance(item, (FlushItem, JobItem)):
                self._count(item, -1)
                _fail(item.future, exc)
            else:
                keep.append(item)
        self._q = keep

    # ------------------------------------------------------------------------------------- task

    async def _wait(self, timeout: float | None) -> bool:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def compact(self, before: float) -> None:
        """Compact the head's minutes ending by ``before`` into chunks (maintenance, before the rollups)."""
        while await self.call(partial(_compact, state=self._state, before=before), standalone=True):
            pass

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        guard = GUARD_INTERVAL if self._check_file is not None else None
        head = self._state.head
        while True:
            self._guard()
            if not self._q:
                if self._closing:
                    await self._write_totals()
                    return
                if self.healthy and head.due():
                    await self._flush_head()  # samples wait no longer than the head's interval
                    continue
                # pending samples: wake up in time to flush them (a fleet that fell silent)
                idle = head.interval if head.pending else guard
                if self.healthy:
                    await self._wait(idle)
                elif not await self._wait(self._retry) and not self._q and not self._closing:
                    await self._probe()
                continue
            deadline = loop.time() + (self._max_delay if self.healthy else self._retry)
            while not (self._closing or self._awaited or (self.healthy and self._weight >= self._max_rows)):
                left = deadline - loop.time()
                if left <= 0:
                    break
                await self._wait(left)
            batch = self._take()
            try:
                await self._commit(batch)
            except Exception as exc:  # noqa: BLE001 - the writer task must survive its own bugs
                log.exception("%s: writer failed on a batch", self._where)
                for item in batch:
                    if isinstance(item, (FlushItem, JobItem)):
                        _fail(item.future, storage_error(exc, self._where))

    def _guard(self) -> None:
        check = self._check_file
        if check is not None:
            try:
                check()
            except Exception:  # noqa: BLE001 - the guard must never stop the writer
                log.exception("%s: the file guard failed", self._where)

    async def _commit(self, batch: list[Item]) -> None:
        if len(batch) == 1 and isinstance(batch[0], JobItem) and batch[0].standalone:
            await self._standalone(batch[0])
            return
        ingest = [i for i in batch if isinstance(i, (FrameItem, HostRecord))]
        jobs = [i for i in batch if isinstance(i, JobItem)]
        flushes = [i for i in batch if isinstance(i, FlushItem)]
        # a flush means everything submitted is written: the running totals and the head's pending samples
        totals = bool(flushes) and (bool(self._state.totals) or self._state.head.due(force=True))
        if ingest or jobs or totals:
            try:
                results = await call(self._conn, partial(_write_batch, state=self._state, items=ingest,
                                                         jobs=[j.fn for j in jobs], totals=bool(flushes)))
            except Exception as exc:  # noqa: BLE001 - classified below
                await self._failed(exc, ingest, jobs, flushes)
                return
            self.commits += 1
            self._set_health(True, None)
            for job, result in zip(jobs, results, strict=True):
                _resolve(job.future, result)
        for f in flushes:
            _resolve(f.future)

    async def _failed(self, exc: Exception, ingest: list[IngestItem], jobs: list[JobItem],
                      flushes: list[FlushItem]) -> None:
        err = storage_error(exc, self._where)
        if is_transient(exc):
            awaited: list[JobItem | FlushItem] = [*jobs, *flushes]
            for one in awaited:
                _fail(one.future, err)
            self._set_health(False, str(err))
            self._fail_queued_awaited(err)
            if self._closing:
                self.rejected += len(ingest)
                log.error("%s: closing with writes failing; %d frames not written: %s",
                          self._where, len(ingest), err)
            else:
                self._requeue(ingest)
            return
        # not the storage's fault: a frame the code cannot write. Isolate it; jobs have their own savepoints.
        log.error("%s: batch of %d frames failed (%s); writing them one by one", self._where, len(ingest),
                  err)
        for n, item in enumerate(ingest):
            try:
                await call(self._conn, partial(_write_batch, state=self._state, items=[item], jobs=[]))
            except Exception as one:  # noqa: BLE001
                if is_transient(one):
                    await self._failed(one, ingest[n:], jobs, flushes)
                    return
                self.rejected += 1
                host = item.host if isinstance(item, FrameItem) else item.name
                log.error("%s: dropped a %s from %s: %s", self._where, type(item).__name__, host, one)
        await self._commit([*jobs, *flushes])

    async def _standalone(self, job: JobItem) -> None:
        try:
            result = await call(self._conn, job.fn)
        except Exception as exc:  # noqa: BLE001
            err = storage_error(exc, self._where)
            if is_transient(exc):
                self._set_health(False, str(err))
            _fail(job.future, err)
            return
        _resolve(job.future, result)

    async def _flush_head(self) -> None:
        """Write the head's pending samples while no frames come (a fleet that fell silent)."""
        try:
            await call(self._conn, partial(_write_batch, state=self._state, items=[], jobs=[]))
        except Exception as exc:  # noqa: BLE001 - the next batch (or flush) tries again
            err = storage_error(exc, self._where)
            if is_transient(exc):
                self._set_health(False, str(err))
            else:
                log.error("%s: writing the held samples failed: %s", self._where, err)
            return
        self.commits += 1
        self._set_health(True, None)

    async def _write_totals(self) -> None:
        """A clean stop: the running totals held back (see :mod:`ingest`) and the head's pending samples
        are written, every minute is compacted into its chunk, and the pages the head's parts used go back
        to the file system (the slack maintenance keeps is for a running store)."""
        try:
            await call(self._conn, partial(_write_batch, state=self._state, items=[], jobs=[], totals=True,
                                           seal=True))
        except Exception as exc:  # noqa: BLE001 - closing: say what is lost, do not raise
            log.error("%s: closing: running totals (spans, GPU-hours) and samples of the last seconds not "
                      "written: %s", self._where, storage_error(exc, self._where))
            return
        try:
            await call(self._conn, _shrink)
        except Exception as exc:  # noqa: BLE001 - closing: nothing is lost, the file stays larger
            log.warning("%s: closing: free pages not given back: %s", self._where,
                        storage_error(exc, self._where))

    async def _probe(self) -> None:
        try:
            await call(self._conn, _probe_write)
        except Exception as exc:  # noqa: BLE001
            self._set_health(False, str(storage_error(exc, self._where)))
        else:
            self._set_health(True, None)

    def set_fault(self, message: str) -> None:
        """Unhealthy for good (until the collector restarts), whatever the next commits do."""
        self.fault = message
        self._set_health(False, message)

    def _set_health(self, ok: bool, message: str | None) -> None:
        if ok and self.fault is not None:
            ok, message = False, self.fault
        changed = ok != self.healthy
        self.healthy = ok
        self.last_error = None if ok else message
        if not changed:
            return
        if ok:
            log.warning("%s: writes work again", self._where)
        else:
            log.error("%s: writes failing: %s", self._where, message)
        try:
            self._on_health(ok, self.last_error)
        except Exception:  # noqa: BLE001 - a broken callback must not stop the writer
            log.exception("%s: on_health_change callback failed", self._where)

    async def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued (one attempt per batch while writes fail), then stop the task."""
        self._closing = True
        self._wake.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                log.error("%s: writer did not drain within %.0f s; %d items lost", self._where, timeout,
                          len(self._q))
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)  # let it finish unwinding before close
        err = StorageError(f"{self._where}: store closed")
        for item in self._q:
            if isinstance(item, (FlushItem, JobItem)):
                _fail(item.future, err)
        self._q.clear()
