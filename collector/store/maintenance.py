"""SQL of the host maintenance table (schema v6); what a window means is collector/maintenance.py's.

One row per window, kept after it ends (``ends_at`` is set to the stop time), so ``maintenance list --all``
answers "when was n3 last let go of, by whom, why" after the fact.
"""

from __future__ import annotations

import sqlite3

from gpufleet.collector.model.views import MaintenanceRecord

_COLS = "id, host, starts_at, ends_at, created_by, comment, silence_id"


def add(conn: sqlite3.Connection, rec: MaintenanceRecord) -> int:
    cur = conn.execute(
        "INSERT INTO maintenance (host, starts_at, ends_at, created_by, comment, silence_id) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (rec.host, rec.starts_at, rec.ends_at, rec.created_by, rec.comment, rec.silence_id))
    return int(cur.lastrowid or 0)


def listing(conn: sqlite3.Connection, *, include_ended: bool, now: float) -> list[MaintenanceRecord]:
    """Windows in force at ``now`` (every window with ``include_ended``), oldest first."""
    where, params = ("1", ()) if include_ended else ("ends_at > ?", (now,))
    rows = conn.execute(f"SELECT {_COLS} FROM maintenance WHERE {where} ORDER BY starts_at, id",
                        params).fetchall()
    return [MaintenanceRecord(id=r[0], host=r[1], starts_at=r[2], ends_at=r[3], created_by=r[4],
                              comment=r[5], silence_id=r[6]) for r in rows]


def end(conn: sqlite3.Connection, window_id: int, now: float) -> bool:
    """End a window now; False if there is no such window or it had already ended."""
    cur = conn.execute("UPDATE maintenance SET ends_at = ? WHERE id = ? AND ends_at > ?",
                       (now, window_id, now))
    return cur.rowcount > 0
