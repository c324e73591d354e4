"""Downsampling and retention, as small steps the writer runs between ingest batches.

Each step is one short ``BEGIN IMMEDIATE`` transaction and returns True while it has more to do, so a big
backlog (first run, a week of downtime) never holds the write lock for long: ingest batches slot in between.

- 1-minute rollups come from raw samples (the chunks: one per host and minute, store/head.py), 1-hour
  rollups from 1-minute ones (min / mean / max of util, memory used, temperature, power, and the sample
  count; the means as SQLite's avg() computed them from the old one-row-per-sample table: store/sqlagg.py).
  Only completed minutes are rolled up (complete ``grace`` seconds after they end, and compacted into
  their chunk first: Store.run_maintenance). A minute that gets samples after its rollup (an agent whose
  clock runs behind, a late replay) is listed in ``rollup_dirty`` by the compaction that stores them and
  rolled up again with its hour; the hour rollup also recomputes the last hour. INSERT OR REPLACE makes
  every step idempotent.
- Retention deletes raw chunks (whole rows: a host's minute) / 1m / 1h rows older than their windows in
  batches, never rows that are not rolled up yet, and records the horizons (``raw_from``, ``m1_from``) the
  queries use to pick a resolution.
- ``PRAGMA incremental_vacuum`` gives freed pages back to the file system once the free list is larger than
  ``vacuum_slack`` pages (a little slack avoids shrinking and regrowing the file every minute).

Every step survives any row an old file may hold (a time of -1e300, of 10 years ahead, text where a number
belongs): rollups only look at times inside the store's window (store/admit.py), and a progress mark that
is not such a time is read as absent. :func:`sweep` removes those rows once, at the first maintenance.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from gpufleet.collector.store import chunkrows, sqlagg
from gpufleet.collector.store._db import in_tx
from gpufleet.collector.store.admit import window
from gpufleet.collector.store.chunkcodec import MEM_USED, POWER, TEMP, UTIL, decode_columns
from gpufleet.collector.store.head import SPAN
from gpufleet.collector.store.queries import meta_float
from gpufleet.collector.units import MAX_DURATION

#: Re-roll this many seconds before the 1-minute high-water mark on each run (late samples).
REDO_SECONDS: Final = 120
#: Roughly how many source rows one rollup step reads.
ROWS_PER_STEP: Final = 100_000

_M1_INSERT: Final = """
INSERT OR REPLACE INTO samples_1m (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_READINGS: Final = (UTIL, MEM_USED, TEMP, POWER)


def minute_rows(data: bytes, minute: int, known: set[int] | None,
                gpu_id: int | None = None) -> list[tuple[object, ...]]:
    """The samples_1m rows of one chunk (one host's minute): per GPU the count, and min / avg / max of each
    reading as SQL's min(), avg() and max() gave them over the old rows, in time order. ``known``: the GPU
    ids the file lists (a chunk may hold a GPU retention removed); ``gpu_id``: that GPU's row only."""
    gpus, _ts, cols = decode_columns(data, gpu_id, _READINGS)
    out: list[tuple[object, ...]] = []
    i, n = 0, len(gpus)
    while i < n:
        gid = gpus[i]
        j = i + 1
        while j < n and gpus[j] == gid:
            j += 1
        if known is None or gid in known:
            row: list[object] = [gid, minute, j - i]
            for c in _READINGS:
                row += sqlagg.min_avg_max(cols[c][i:j])
            out.append(tuple(row))
        i = j
    return out


def _roll_chunks(conn: sqlite3.Connection, start: int, end: int) -> None:
    """1-minute rollups of every chunk whose minute lies in [start, end)."""
    known = {int(r[0]) for r in conn.execute("SELECT id FROM gpus")}
    rows: list[tuple[object, ...]] = []
    for (hid,) in conn.execute("SELECT id FROM hosts").fetchall():
        for span, data in chunkrows.scan(conn, hid, start, end - 1):
            rows += minute_rows(data, span, known)
    conn.executemany(_M1_INSERT, rows)


def _wmean(col: str) -> str:
    return f"sum({col} * n) / sum(CASE WHEN {col} IS NOT NULL THEN n END)"


_AGG_MINUTES: Final = f"""
INSERT OR REPLACE INTO samples_1h (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
SELECT gpu_id, (bucket / 3600) * 3600 AS b, sum(n),
       min(util_min), {_wmean("util_mean")}, max(util_max), min(mem_min), {_wmean("mem_mean")}, max(mem_max),
       min(temp_min), {_wmean("temp_mean")}, max(temp_max), min(power_min), {_wmean("power_mean")},
       max(power_max)
FROM samples_1m WHERE gpu_id IN (SELECT id FROM gpus) AND bucket >= ? AND bucket < ?
GROUP BY gpu_id, b
"""


@dataclass(slots=True, frozen=True)
class Policy:
    raw_retention: float
    minute_retention: float
    hour_retention: float
    batch: int = 5000  # rows deleted per transaction
    grace: float = 10.0  # seconds after a minute ends before it is rolled up
    vacuum_slack: int = 1024  # free pages kept before incremental_vacuum gives pages back


def _set_meta(conn: sqlite3.Connection, key: str, value: float, *, only_up: bool = False) -> None:
    update = "max(value, excluded.value)" if only_up else "excluded.value"
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                 f"ON CONFLICT (key) DO UPDATE SET value = {update}", (key, value))


def _mark(conn: sqlite3.Connection, key: str, now: float) -> float | None:
    """A progress mark, or None when it is absent or no plausible time (an old or edited file). A mark ahead
    of ``now`` is kept: after the clock stepped back, rollups wait for it rather than roll it all again."""
    value = meta_float(conn, key)
    lo, _hi = window(now)
    return value if value is not None and lo <= value <= now + MAX_DURATION else None


def _first_at_or_after(conn: sqlite3.Connection, table: str, col: str, after: float,
                       upto: float) -> float | None:
    """Earliest time in ``table`` in [after, upto]: one index seek per GPU (per host for chunks, whose
    minutes stand for their samples) instead of a scan."""
    if table == "chunks":
        sql = ("SELECT min(m) FROM (SELECT (SELECT min(span) FROM chunks WHERE host_id = h.id AND span >= ? "
               "AND span <= ? AND piece = 0) AS m FROM hosts h)")
        after = math.floor(after / SPAN) * SPAN if math.isfinite(after) else after
    else:
        sql = (f"SELECT min(m) FROM (SELECT (SELECT min({col}) FROM {table} "
               f"WHERE gpu_id = g.id AND {col} >= ? AND {col} <= ?) AS m FROM gpus g)")
    row = conn.execute(sql, (after, upto)).fetchone()
    return None if row[0] is None else float(row[0])


def _gpu_count(conn: sqlite3.Connection) -> int:
    return max(1, int(conn.execute("SELECT count(*) FROM gpus").fetchone()[0]))


def _floor(t: float, step: int) -> int:
    return int(math.floor(t / step)) * step


def _roll(conn: sqlite3.Connection, *, mark: str, source: str, col: str, sql: str | None, size: int,
          redo: int, boundary: int, now: float) -> bool:
    """Roll ``source`` into buckets of ``size`` seconds from the ``mark`` high-water mark to ``boundary``."""
    lo, hi = window(now)
    upto_f = _mark(conn, mark, now)  # None also when it is no time the store writes: start from the data
    if upto_f is None:
        first = _first_at_or_after(conn, source, col, lo, hi)
        if first is None:
            return False
        upto = start = _floor(first, size)
    else:
        upto = int(upto_f)
        start = upto - redo
    if upto >= boundary:
        return False
    rows_per_bucket = _gpu_count(conn) * 60  # 1 Hz raw into minutes, or 60 minutes into an hour
    end = min(boundary, upto + max(1, ROWS_PER_STEP // rows_per_bucket) * size)
    if sql is None:
        _roll_chunks(conn, start, end)
    else:
        conn.execute(sql, (start, end))
    nxt = end
    if end < boundary:  # skip a gap with no data in one step
        later = _first_at_or_after(conn, source, col, end, hi)
        nxt = boundary if later is None else min(boundary, max(end, _floor(later, size)))
    _set_meta(conn, mark, nxt)
    return nxt < boundary


def minute_boundary(now: float, policy: Policy) -> int:
    """Minutes before this are complete at ``now`` (``grace`` after their end): what the rollup reads."""
    return _floor(now - policy.grace, 60)


def rollup_minutes(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    boundary = minute_boundary(now, policy)
    # no redo: every sample stored for a minute already rolled up marks it dirty (store/head.py)
    return in_tx(conn, partial(_roll, conn, mark="m1_upto", source="chunks", col="span", sql=None,
                               size=60, redo=0, boundary=boundary, now=now))


_REROLL_HOUR: Final = f"""
INSERT OR REPLACE INTO samples_1h (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
SELECT ?1, ?2, sum(n),
       min(util_min), {_wmean("util_mean")}, max(util_max), min(mem_min), {_wmean("mem_mean")}, max(mem_max),
       min(temp_min), {_wmean("temp_mean")}, max(temp_max), min(power_min), {_wmean("power_mean")},
       max(power_max)
FROM samples_1m WHERE gpu_id = ?1 AND bucket >= ?2 AND bucket < ?2 + 3600 HAVING count(*) > 0
"""


def rollup_dirty(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    """Roll up again the minutes (and their hours) that got samples after they were rolled up."""
    def work() -> bool:
        conn.execute("DELETE FROM rollup_dirty WHERE typeof(bucket) != 'integer' OR bucket < ?",
                     (window(now)[0],))
        batch = conn.execute("SELECT gpu_id, bucket FROM rollup_dirty LIMIT ?", (policy.batch,)).fetchall()
        if not batch:
            return False
        raw_from, m1_from = meta_float(conn, "raw_from"), meta_float(conn, "m1_from")
        h1 = _mark(conn, "h1_upto", now)
        # a minute (an hour) whose finer rows retention already deleted keeps the rollup it has
        redo = [(g, b) for g, b in batch if raw_from is None or b >= raw_from]
        hosts = dict(conn.execute("SELECT id, host_id FROM gpus").fetchall())
        rows: list[tuple[object, ...]] = []
        for g, b in redo:
            host = hosts.get(g)
            chunk = None if host is None else chunkrows.read(conn, host, b)
            if chunk is not None:  # no samples: the minute keeps the rollup it has
                rows += minute_rows(chunk, b, None, g)
        conn.executemany(_M1_INSERT, rows)
        if h1 is not None:
            hours = sorted({(g, b // 3600 * 3600) for g, b in redo
                            if b < h1 and (m1_from is None or b // 3600 * 3600 >= m1_from)})
            conn.executemany(_REROLL_HOUR, hours)
        conn.executemany("DELETE FROM rollup_dirty WHERE gpu_id = ? AND bucket = ?", batch)
        return len(batch) >= policy.batch
    return in_tx(conn, work)


def rollup_hours(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    def work() -> bool:
        m1 = _mark(conn, "m1_upto", now)
        if m1 is None:
            return False
        return _roll(conn, mark="h1_upto", source="samples_1m", col="bucket", sql=_AGG_MINUTES, size=3600,
                     redo=3600, boundary=_floor(min(m1, now), 3600), now=now)
    return in_tx(conn, work)


# ------------------------------------------------------------------------------------------ retention


def _delete(conn: sqlite3.Connection, sql: str, cutoff: float, batch: int, horizon: str | None) -> bool:
    def work() -> bool:
        if horizon is not None:
            _set_meta(conn, horizon, cutoff, only_up=True)
        return conn.execute(sql, (cutoff, batch)).rowcount >= batch
    return in_tx(conn, work)


def delete_raw(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    """Whole chunks (a host's minute) that end by the cutoff; ``raw_from`` is the cutoff itself, so the
    queries pick the same resolution as when raw samples went one by one."""
    m1 = _mark(conn, "m1_upto", now)
    if m1 is None:
        return False  # nothing rolled up yet: keep everything
    cutoff = min(now - policy.raw_retention, m1 - REDO_SECONDS)

    def work() -> bool:
        _set_meta(conn, "raw_from", cutoff, only_up=True)
        deleted = 0
        for (hid,) in conn.execute("SELECT id FROM hosts").fetchall():
            deleted += chunkrows.delete_before(conn, hid, cutoff - SPAN, policy.batch)
        return deleted >= policy.batch
    return in_tx(conn, work)


def delete_minutes(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    h1 = _mark(conn, "h1_upto", now)
    if h1 is None:
        return False
    cutoff = min(now - policy.minute_retention, h1 - 3600)
    return _delete(conn, "DELETE FROM samples_1m WHERE (gpu_id, bucket) IN (SELECT gpu_id, bucket FROM "
                   "samples_1m WHERE gpu_id IN (SELECT id FROM gpus) AND bucket < ? LIMIT ?)", cutoff,
                   policy.batch, "m1_from")


def delete_hours(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    return _delete(conn, "DELETE FROM samples_1h WHERE (gpu_id, bucket) IN (SELECT gpu_id, bucket FROM "
                   "samples_1h WHERE gpu_id IN (SELECT id FROM gpus) AND bucket < ? LIMIT ?)",
                   now - policy.hour_retention, policy.batch, "h1_from")


_YEARLY: Final = (
    "DELETE FROM usage WHERE (hour, host_id, gpu_id, user) IN "
    "(SELECT hour, host_id, gpu_id, user FROM usage WHERE hour < ? LIMIT ?)",
    "DELETE FROM capacity WHERE (hour, host_id, gpu_id) IN "
    "(SELECT hour, host_id, gpu_id FROM capacity WHERE hour < ? LIMIT ?)",
    "DELETE FROM processes WHERE id IN (SELECT id FROM processes WHERE last_seen < ? LIMIT ?)",
    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts < ? LIMIT ?)",
    "DELETE FROM alerts WHERE fingerprint IN (SELECT fingerprint FROM alerts WHERE state = 'resolved' "
    "AND resolved_at < ? LIMIT ?)",
    "DELETE FROM silences WHERE id IN (SELECT id FROM silences WHERE ends_at < ? LIMIT ?)",
    "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE ended < ? LIMIT ?)",
    "DELETE FROM slurm_usage WHERE (hour, host_id, gpu_id, job) IN "
    "(SELECT hour, host_id, gpu_id, job FROM slurm_usage WHERE hour < ? LIMIT ?)",
    "DELETE FROM slurm_jobs WHERE (host_id, job) IN "
    "(SELECT host_id, job FROM slurm_jobs WHERE last_seen < ? LIMIT ?)",
)


def delete_history(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    """Usage and capacity, process spans, events, resolved alerts, expired silences, job records, Slurm
    jobs and their usage: kept as long as 1-hour rollups."""
    more = False
    for sql in _YEARLY:
        more = _delete(conn, sql, now - policy.hour_retention, policy.batch, None) or more
    return more


#: GPUs last seen before the longest retention, with nothing left that refers to them (the steps before
#: this one deleted their history): indexed guards first, usage (no gpu_id index) last.
_UNUSED_GPUS: Final = (
    "SELECT id, host_id, uuid FROM gpus g WHERE last_seen < ?1"
    # raw samples are its host's chunks: none in its lifetime, none of its own
    " AND NOT EXISTS (SELECT 1 FROM chunks WHERE host_id = g.host_id AND span >= g.first_seen - 60"
    " AND span <= g.last_seen AND piece = 0)"
    " AND NOT EXISTS (SELECT 1 FROM chunk_parts WHERE host_id = g.host_id AND span >= g.first_seen - 60"
    " AND span <= g.last_seen)"
    " AND NOT EXISTS (SELECT 1 FROM samples_1m WHERE gpu_id = g.id)"
    " AND NOT EXISTS (SELECT 1 FROM samples_1h WHERE gpu_id = g.id)"
    " AND NOT EXISTS (SELECT 1 FROM processes WHERE gpu_id = g.id)"
    " AND NOT EXISTS (SELECT 1 FROM rollup_dirty WHERE gpu_id = g.id)"
    " AND NOT EXISTS (SELECT 1 FROM usage WHERE gpu_id = g.id)"
    " AND NOT EXISTS (SELECT 1 FROM slurm_usage WHERE gpu_id = g.id) LIMIT ?2"
)


def delete_gpus(conn: sqlite3.Connection, now: float, policy: Policy) -> list[tuple[int, str]]:
    """Delete one batch of unused GPU rows (and their placements); returns their (host id, uuid), so the
    writer's id cache forgets them too. A GPU that comes back later is simply registered again."""
    def work() -> list[tuple[int, str]]:
        rows = conn.execute(_UNUSED_GPUS, (now - policy.hour_retention, policy.batch)).fetchall()
        ids = [(int(r[0]),) for r in rows]
        conn.executemany("DELETE FROM gpu_placements WHERE gpu_id = ?", ids)
        conn.executemany("DELETE FROM gpus WHERE id = ?", ids)
        return [(int(r[1]), str(r[2])) for r in rows]
    result: list[tuple[int, str]] = in_tx(conn, work)
    return result


def vacuum(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if free <= policy.vacuum_slack:
        return False
    pages = min(free - policy.vacuum_slack, 2000)
    # each sqlite3_step frees one page, and Python's execute() steps a row-less statement only once;
    # executescript() steps it to the end
    conn.executescript(f"PRAGMA incremental_vacuum({pages})")
    return free - pages > policy.vacuum_slack


def checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """PASSIVE: copies what it can without waiting for readers; (busy, wal frames, frames checkpointed)."""
    busy, log_frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(log_frames), int(done)


Step = Callable[[sqlite3.Connection, float, Policy], bool]
#: In order: roll up first (retention never deletes what is not rolled up), then delete, then shrink.
STEPS: Final[tuple[Step, ...]] = (rollup_minutes, rollup_dirty, rollup_hours, delete_raw, delete_minutes,
                                  delete_hours, delete_history, vacuum)
