"""Downsampling and retention, as small steps the writer runs between ingest batches.

Each step is one short ``BEGIN IMMEDIATE`` transaction and returns True while it has more to do, so a big
backlog (first run, a week of downtime) never holds the write lock for long: ingest batches slot in between.

- 1-minute rollups come from raw samples, 1-hour rollups from 1-minute ones (min / mean / max of util,
  memory used, temperature, power, and the sample count). Only completed buckets are rolled up
  (a minute is complete ``grace`` seconds after it ends); each run also recomputes the last two minutes /
  the last hour, so a slightly late sample is still counted; minutes that got samples later still (an agent
  whose clock runs behind, a late replay) are listed in ``rollup_dirty`` by the writer and rolled up again
  with their hour. INSERT OR REPLACE makes every step idempotent.
- Retention deletes raw / 1m / 1h rows older than their windows in batches, never rows that are not rolled
  up yet, and records the horizons (``raw_from``, ``m1_from``) the queries use to pick a resolution.
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

from gpufleet.collector.store._db import in_tx
from gpufleet.collector.store.admit import window
from gpufleet.collector.store.queries import meta_float
from gpufleet.collector.units import MAX_DURATION

#: Re-roll this many seconds before the 1-minute high-water mark on each run (late samples).
REDO_SECONDS: Final = 120
#: Roughly how many source rows one rollup step reads.
ROWS_PER_STEP: Final = 100_000

_AGG_RAW: Final = """
INSERT OR REPLACE INTO samples_1m (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
SELECT gpu_id, CAST(ts / 60 AS INTEGER) * 60 AS b, count(*),
       min(util), avg(util), max(util), min(mem_used), avg(mem_used), max(mem_used),
       min(temp), avg(temp), max(temp), min(power), avg(power), max(power)
FROM samples WHERE gpu_id IN (SELECT id FROM gpus) AND ts >= ? AND ts < ?
GROUP BY gpu_id, b
"""


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
    """Earliest time in ``table`` in [after, upto]: one index seek per GPU instead of a scan."""
    row = conn.execute(f"SELECT min(m) FROM (SELECT (SELECT min({col}) FROM {table} "
                       f"WHERE gpu_id = g.id AND {col} >= ? AND {col} <= ?) AS m FROM gpus g)",
                       (after, upto)).fetchone()
    return None if row[0] is None else float(row[0])


def _gpu_count(conn: sqlite3.Connection) -> int:
    return max(1, int(conn.execute("SELECT count(*) FROM gpus").fetchone()[0]))


def _floor(t: float, step: int) -> int:
    return int(math.floor(t / step)) * step


def _roll(conn: sqlite3.Connection, *, mark: str, source: str, col: str, sql: str, size: int, redo: int,
          boundary: int, now: float) -> bool:
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
    conn.execute(sql, (start, end))
    nxt = end
    if end < boundary:  # skip a gap with no data in one step
        later = _first_at_or_after(conn, source, col, end, hi)
        nxt = boundary if later is None else min(boundary, max(end, _floor(later, size)))
    _set_meta(conn, mark, nxt)
    return nxt < boundary


def rollup_minutes(conn: sqlite3.Connection, now: float, policy: Policy) -> bool:
    boundary = _floor(now - policy.grace, 60)
    return in_tx(conn, partial(_roll, conn, mark="m1_upto", source="samples", col="ts", sql=_AGG_RAW,
                               size=60, redo=REDO_SECONDS, boundary=boundary, now=now))


_REROLL_MINUTE: Final = """
INSERT OR REPLACE INTO samples_1m (gpu_id, bucket, n, util_min, util_mean, util_max,
    mem_min, mem_mean, mem_max, temp_min, temp_mean, temp_max, power_min, power_mean, power_max)
SELECT ?1, ?2, count(*), min(util), avg(util), max(util), min(mem_used), avg(mem_used), max(mem_used),
       min(temp), avg(temp), max(temp), min(power), avg(power), max(power)
FROM samples WHERE gpu_id = ?1 AND ts >= ?2 AND ts < ?2 + 60 HAVING count(*) > 0
"""
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
        conn.executemany(_REROLL_MINUTE, redo)
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
    m1 = _mark(conn, "m1_upto", now)
    if m1 is None:
        return False  # nothing rolled up yet: keep everything
    cutoff = min(now - policy.raw_retention, m1 - REDO_SECONDS)
    return _delete(conn, "DELETE FROM samples WHERE (gpu_id, ts) IN (SELECT gpu_id, ts FROM samples "
                   "WHERE gpu_id IN (SELECT id FROM gpus) AND ts < ? LIMIT ?)", cutoff, policy.batch,
                   "raw_from")


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
    " AND NOT EXISTS (SELECT 1 FROM samples WHERE gpu_id = g.id)"
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
