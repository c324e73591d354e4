"""Rows no store writes today, removed from a file an older version wrote: run once, at the first
maintenance after the store opens (from then on store/admit.py keeps such rows out), by the store's clock.

An older collector stored whatever time reached it: a sample at ts=-1e300 (every later rollup failed with
OverflowError), one ten years ahead (the GPU's accounting counted every later sample as late, and a process
looked alive for ten years), text where a time belongs. Times outside the store's window (admit.window,
with a day's room ahead: a clock stepped back by hours leaves real rows that far ahead) are deleted; a
last-seen past it is pulled back to the row's first sighting (the span or host is real, the one bogus
sighting is not); a progress mark that is no such time is dropped (rollups start again from the data).
Each table is one statement or one index seek per GPU, so even a large file takes a moment.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

from gpufleet.collector.store._db import in_tx
from gpufleet.collector.store.admit import window

log = logging.getLogger(__name__)

#: How far ahead of the clock a stored time may lie and stay (admission allows MAX_CLOCK_AHEAD only).
AHEAD: Final = 86400.0

#: Per GPU (seeks on the (gpu_id, time) key): times below the window, then above it (text sorts above).
_PER_GPU: Final = tuple(
    sql for table, col in (("samples_1m", "bucket"), ("samples_1h", "bucket"))
    for sql in (f"DELETE FROM {table} WHERE gpu_id = :gpu AND {col} < :lo",
                f"DELETE FROM {table} WHERE gpu_id = :gpu AND {col} > :hi"))
#: Per host: raw chunks and head parts wholly below the window, or above it (a minute is 60 s).
_PER_HOST: Final = tuple(
    sql for table in ("chunks", "chunk_parts")
    for sql in (f"DELETE FROM {table} WHERE host_id = :host AND span <= :lo - 60",
                f"DELETE FROM {table} WHERE host_id = :host AND span > :hi"))
#: Whole tables: (statement over named :lo, :hi, :now).
_TABLES: Final = (
    "DELETE FROM rollup_dirty WHERE NOT (bucket >= :lo AND bucket <= :hi)",
    "DELETE FROM events WHERE ts < :lo OR ts > :hi",
    "DELETE FROM processes WHERE last_seen < :lo OR (last_seen > :hi AND (first_seen > :hi "
    "OR first_seen < :lo OR start_time > :hi))",
    "UPDATE processes SET last_seen = first_seen WHERE last_seen > :hi",
    *(f"DELETE FROM {t} WHERE hour < :lo OR hour > :hi" for t in ("usage", "capacity", "slurm_usage")),
    "UPDATE hosts SET last_seen = NULL WHERE last_seen > :hi OR last_seen < :lo",
    "UPDATE hosts SET since = :now WHERE since > :hi OR since < :lo",
    "UPDATE gpus SET first_seen = :now WHERE first_seen > :hi OR first_seen < :lo",
    "UPDATE gpus SET last_seen = first_seen WHERE last_seen > :hi OR last_seen < :lo",
    "UPDATE gpus SET last_sample = NULL WHERE last_sample > :hi OR last_sample < :lo",
    "DELETE FROM meta WHERE key IN ('m1_upto', 'h1_upto', 'raw_from', 'm1_from', 'h1_from') AND "
    "(typeof(value) NOT IN ('integer', 'real') OR value < :lo OR value > :hi)",
)


def sweep(conn: sqlite3.Connection, now: float) -> int:
    """Remove (or pull back) what lies outside the window at ``now``; returns how many rows changed."""
    lo, hi = window(now, AHEAD)

    def work() -> int:
        gpus = [{"gpu": gid, "lo": lo, "hi": hi} for (gid,) in conn.execute("SELECT id FROM gpus")]
        hosts = [{"host": hid, "lo": lo, "hi": hi} for (hid,) in conn.execute("SELECT id FROM hosts")]
        changed = 0
        for sql in _PER_HOST:
            before = conn.total_changes
            conn.executemany(sql, hosts)
            changed += conn.total_changes - before
        for sql in _PER_GPU:
            before = conn.total_changes
            conn.executemany(sql, gpus)
            changed += conn.total_changes - before
        for sql in _TABLES:
            changed += conn.execute(sql, {"lo": lo, "hi": hi, "now": now}).rowcount
        return changed

    changed: int = in_tx(conn, work)
    if changed:
        log.warning("removed or corrected %d rows holding times no store writes (outside %.0f .. %.0f, or "
                    "not numbers): left by an older version", changed, lo, hi)
    return changed
