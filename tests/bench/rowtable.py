"""The one-row-per-sample table raw history was before chunks (schema v1..v6), for the benches' baselines:
"plain executemany of the same sample rows" needs a table to insert them into."""

from __future__ import annotations

import sqlite3
from typing import Final

from gpufleet.collector.store import schema

#: The old ``samples`` table, as schema v1 created it.
TABLE: Final = next(s for s in schema.MIGRATIONS[0] if isinstance(s, str) and "CREATE TABLE samples (" in s)
INSERT: Final = ("INSERT OR IGNORE INTO samples (gpu_id, ts, util, util_mem, mem_used, temp, power, "
                 "clock_sm, clock_mem, fan, ecc_corrected, ecc_uncorrected, throttle, error) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def create(conn: sqlite3.Connection) -> None:
    """The store's schema, and beside it the old samples table."""
    schema.migrate(conn)
    conn.execute(TABLE)
