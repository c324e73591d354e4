"""SQL of the notification log table (schema v2); what a row means is collector/notify/nflog.py's."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

_COLS = ("group_key, notifier, pending, attempts, failing_since, last_error,"
         " delivered_at, delivered, updated_at")


@dataclass(slots=True)
class NflogRecord:
    group_key: str
    notifier: str
    pending: str | None  # the notification not yet accepted, as JSON; None once delivered
    attempts: int
    failing_since: float | None
    last_error: str | None
    delivered_at: float | None
    delivered: str | None  # what was last accepted (JSON summary)
    updated_at: float


def save(conn: sqlite3.Connection, rows: list[NflogRecord]) -> None:
    conn.executemany(
        f"INSERT OR REPLACE INTO notification_log ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(r.group_key, r.notifier, r.pending, r.attempts, r.failing_since, r.last_error, r.delivered_at,
          r.delivered, r.updated_at) for r in rows])


def load(conn: sqlite3.Connection, *, since: float) -> list[NflogRecord]:
    """Every row still pending, and delivered ones updated since ``since``."""
    cur = conn.execute(f"SELECT {_COLS} FROM notification_log WHERE pending IS NOT NULL OR updated_at >= ?",
                       (since,))
    return [NflogRecord(*row) for row in cur.fetchall()]


def prune(conn: sqlite3.Connection, *, before: float) -> None:
    conn.execute("DELETE FROM notification_log WHERE pending IS NULL AND updated_at < ?", (before,))
