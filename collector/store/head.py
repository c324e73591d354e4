"""The head: raw samples on their way into chunks, like a TSDB's head block with its WAL.

A chunk (table ``chunks``, :mod:`chunkcodec`) holds one host's samples of one minute (``SPAN``), packed by
column. Until its minute is over, a host's samples live here:

- *pending*, in memory: what the writer's batches took since the last flush (ingest.py hands each batch's
  rows over with :meth:`Head.take`; they join ``pending`` when the batch commits).
- *parts* (table ``chunk_parts``): every ``interval`` seconds (2 by default) a flush writes each host's
  pending samples as one row per host and minute, in the writer's transaction (WAL, synchronous=FULL: the
  store's durability promise). So a kill -9 loses what was pending: at most ``interval`` plus one batch
  (0.5 s) of samples. ``gpus.last_sample`` moves with the flush, so it always names a stored sample.
- *compaction*: once a host's samples have passed the end of a minute, the flush turns that minute's parts
  (and the chunk already there, if a late sample came for a minute compacted before) into one chunk and
  deletes the parts: a few hundred hosts per flush at most, so the end of a minute never stalls ingest.
  Maintenance compacts every minute before the rollups' boundary first (hosts that went silent), and a
  clean stop compacts everything.

A sample written twice (a replay; after a clock step the same time with other readings) keeps its first
writing, as ``INSERT OR IGNORE`` did: chunk first, then the parts in the order they were written.
A minute that already has its 1-minute rollup (``m1_upto``) and gets samples later is listed in
``rollup_dirty`` by the compaction that stores them, for maintenance to roll up again.

Every change to this object's memory is staged and applied when the transaction commits
(:meth:`committed`), or dropped when it rolls back (:meth:`rolled_back`): what it remembers is always what
the file holds plus what is pending.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Final

from gpufleet.collector.store import chunkcodec, chunkrows
from gpufleet.collector.store.chunkcodec import Row

#: Seconds of samples one chunk holds: one minute, aligned (so a chunk is exactly a 1-minute rollup's input).
SPAN: Final = 60
#: Seconds between flushes of the pending samples (kill -9 loses at most this plus one batch).
FLUSH_INTERVAL: Final = 2.0
#: Host-minutes one flush compacts at most (the rest wait for the next flush).
COMPACT_BATCH: Final = 300

PART_INSERT: Final = "INSERT INTO chunk_parts (host_id, span, n, data) VALUES (?, ?, ?, ?)"


def span_of(ts: float) -> int:
    """The start of the chunk a sample taken at ``ts`` belongs in."""
    return int(ts // SPAN) * SPAN


_TS: Final = itemgetter(1)


def by_span(rows: Sequence[Row]) -> dict[int, list[Row]]:
    """The rows grouped by the minute they belong in, each group in the rows' order."""
    if not rows:
        return {}
    times = list(map(_TS, rows))
    first, last = span_of(min(times)), span_of(max(times))
    if first == last:  # nearly always: a host's samples of the last seconds
        return {first: list(rows)}
    out: dict[int, list[Row]] = {}
    for r in rows:
        span = int(r[1] // SPAN) * SPAN
        group = out.get(span)
        if group is None:
            out[span] = [r]
        else:
            group.append(r)
    return out


def stored_rows(conn: sqlite3.Connection, host_id: int, span: int) -> Iterator[Row]:
    """A host-minute's rows in the file, in the order they were written (first: the chunk)."""
    blob = chunkrows.read(conn, host_id, span)
    if blob is not None:
        yield from chunkcodec.decode(blob)
    for (data,) in conn.execute("SELECT data FROM chunk_parts WHERE host_id = ? AND span = ? ORDER BY id",
                                (host_id, span)):
        yield from chunkcodec.decode_rows(data)


def compact(conn: sqlite3.Connection, host_id: int, span: int, rolled_upto: float | None) -> None:
    """Merge a host-minute's parts (and its chunk, if any) into its chunk; delete the parts. The minute's
    GPUs that got samples after its rollup are marked in ``rollup_dirty``."""
    chunk = chunkrows.read(conn, host_id, span)
    rows: list[Row] = chunkcodec.decode(chunk) if chunk is not None else []
    added: list[Row] = []
    for (data,) in conn.execute("SELECT data FROM chunk_parts WHERE host_id = ? AND span = ? ORDER BY id",
                                (host_id, span)):
        added += chunkcodec.decode_rows(data)
    merged = chunkcodec.normalize(rows + added)
    if merged:
        blob = chunkcodec.encode(merged)
        if chunk is None:
            chunkrows.insert(conn, [(host_id, span, len(merged), blob)])
        else:
            chunkrows.replace(conn, host_id, span, len(merged), blob)
    conn.execute("DELETE FROM chunk_parts WHERE host_id = ? AND span = ?", (host_id, span))
    if rolled_upto is not None and span < rolled_upto and added:
        conn.executemany("INSERT OR IGNORE INTO rollup_dirty (gpu_id, bucket) VALUES (?, ?)",
                         [(gid, span) for gid in sorted({r[0] for r in added})])


def rolled_upto(conn: sqlite3.Connection) -> float | None:
    """Minutes before this have their 1-minute rollup (meta ``m1_upto``)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'm1_upto'").fetchone()
    try:
        return None if row is None or row[0] is None else float(row[0])
    except (TypeError, ValueError):
        return None


class Head:
    """Pending samples and what the file holds in parts; the writer's thread only (module docstring)."""

    def __init__(self, interval: float = FLUSH_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self.pending: dict[int, list[Row]] = {}  # host id -> rows not written yet (committed batches)
        self._gpu_last: dict[int, float] = {}  # gpu id -> newest pending sample time (not replays)
        self.newest: dict[int, float] = {}  # host id -> newest sample time seen
        self._parts: dict[int, set[int]] | None = None  # host id -> minutes with parts in the file
        self._batch: dict[int, list[Row]] = {}  # the batch in progress (take), until it commits
        self._batch_last: dict[int, float] = {}
        self._staged: list[Callable[[], None]] = []
        self._flushed_at = float("-inf")

    # ----------------------------------------------------------------------------------- batches

    def take(self, samples: dict[int, list[Row]], gpu_last: dict[int, float]) -> None:
        """The batch's sample rows (host id -> rows) and newest fresh sample per GPU; in its transaction."""
        self._batch = samples
        self._batch_last = gpu_last
        newest = self.newest
        for hid, rows in samples.items():
            if not rows:
                continue
            top = max(map(_TS, rows))
            if top > newest.get(hid, float("-inf")):
                newest[hid] = top

    def due(self, force: bool = False) -> bool:
        """Is it time to flush (or ``force``: a flush someone awaits, a clean stop)?"""
        if not (self.pending or self._batch or self._gpu_last or self._batch_last):
            return False
        return force or self._clock() - self._flushed_at >= self.interval

    def committed(self) -> None:
        """The transaction committed: apply what it staged; the batch joins the pending samples."""
        for change in self._staged:
            change()
        self._staged.clear()
        for hid, rows in self._batch.items():
            self.pending.setdefault(hid, []).extend(rows)
        for gid, ts in self._batch_last.items():
            if ts > self._gpu_last.get(gid, float("-inf")):
                self._gpu_last[gid] = ts
        self._batch, self._batch_last = {}, {}

    def rolled_back(self) -> None:
        """The transaction rolled back: nothing it did happened (its frames are written again, or dropped)."""
        self._staged.clear()
        self._batch, self._batch_last = {}, {}

    # ------------------------------------------------------------------------------------- flush

    def _parts_of(self, conn: sqlite3.Connection) -> dict[int, set[int]]:
        if self._parts is None:  # after a start: what an earlier run left in parts (a kill -9)
            parts: dict[int, set[int]] = {}
            for hid, span in conn.execute("SELECT DISTINCT host_id, span FROM chunk_parts"):
                parts.setdefault(int(hid), set()).add(int(span))
            self._parts = parts
        return self._parts

    def flush(self, conn: sqlite3.Connection, *, before: float | None = None,
              budget: int | None = COMPACT_BATCH) -> bool:
        """Write the pending samples (and the batch's) as parts, move ``gpus.last_sample``, and compact the
        minutes each host has passed (``before``: also every minute ending by then; a clean stop passes
        +inf), at most ``budget`` of them (None: all). Inside the caller's transaction, once per transaction:
        what it did is remembered at commit (:meth:`committed`). True when compactions are left for the next
        transaction."""
        if self._staged:
            raise RuntimeError("Head.flush twice in one transaction: the second would write the same samples")
        parts = self._parts_of(conn)
        added: dict[int, set[int]] = {}
        rows = []
        for hid, groups in _merge(self.pending, self._batch).items():
            for span, group in groups.items():
                rows.append((hid, span, len(group), chunkcodec.encode_rows(group)))
                added.setdefault(hid, set()).add(span)
        conn.executemany(PART_INSERT, rows)
        last = dict(self._gpu_last)
        for gid, ts in self._batch_last.items():
            if ts > last.get(gid, float("-inf")):
                last[gid] = ts
        if last:
            conn.executemany("UPDATE gpus SET last_seen = max(last_seen, ?1), "
                             "last_sample = max(coalesce(last_sample, ?1), ?1) WHERE id = ?2",
                             [(ts, gid) for gid, ts in last.items()])
        due: list[tuple[int, int]] = []
        for hid in set(parts) | set(added):
            spans = parts.get(hid, set()) | added.get(hid, set())
            horizon = self.newest.get(hid, float("-inf"))
            if before is not None:
                horizon = max(horizon, before)
            due += ((hid, span) for span in spans if span + SPAN <= horizon)
        due.sort(key=lambda hs: hs[1])  # oldest minutes first
        done = due[:budget]
        if done:
            mark = rolled_upto(conn)
            for hid, span in done:
                compact(conn, hid, span, mark)

        def apply() -> None:
            self.pending.clear()
            self._gpu_last.clear()
            self._flushed_at = self._clock()
            for hid, spans in added.items():
                parts.setdefault(hid, set()).update(spans)
            for hid, span in done:
                left = parts.get(hid)
                if left is not None:
                    left.discard(span)
                    if not left:
                        del parts[hid]
        self._staged.append(apply)
        return len(due) > len(done)

    # ------------------------------------------------------------------------------ what is stored

    def stored(self, conn: sqlite3.Connection, host_id: int, gpu_id: int, ts: float) -> bool:
        """Is a sample of this GPU at ``ts`` stored (or pending)? A replay across a clock step (ingest.py)."""
        if any(r[0] == gpu_id and r[1] == ts for r in self.pending.get(host_id, ())):
            return True
        return any(r[0] == gpu_id and r[1] == ts for r in stored_rows(conn, host_id, span_of(ts)))

    def newest_pending(self, gpu_id: int) -> float | None:
        return self._gpu_last.get(gpu_id)


def _merge(a: dict[int, list[Row]], b: dict[int, list[Row]]) -> dict[int, dict[int, list[Row]]]:
    """Host id -> minute -> rows, ``a``'s rows before ``b``'s."""
    out: dict[int, dict[int, list[Row]]] = {}
    for hid in a.keys() | b.keys():
        out[hid] = by_span([*a.get(hid, ()), *b.get(hid, ())])
    return out

