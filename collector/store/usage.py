"""The GPU-hours tables: what each sample charged, summed per hour, host, GPU and user (``usage``), and each
GPU's observed and free seconds (``capacity``), so the report shows idle capacity: GPU-hours nobody held.

What a sample charges and to whom is collector/fleet/accounting.py's (the one owner: the job records charge
the same way); this module adds its charges into hourly buckets and reads them back. A range query is a
fast SUM at hour granularity (a range is widened to whole hours).
"""

from __future__ import annotations

import math
import sqlite3
from typing import Final

from gpufleet.collector.fleet.accounting import Hours
from gpufleet.collector.model.records import CapacityRow, UsageRow

UsageKey = tuple[int, int, int, str]  # hour, host_id, gpu_id, user (or Slurm job id)
CapacityKey = tuple[int, int, int]  # hour, host_id, gpu_id


def hour_of(ts: float) -> int:
    return int(math.floor(ts / 3600.0)) * 3600


def add(acc: dict[UsageKey, list[float]], key: UsageKey, hours: Hours) -> None:
    """Add one charge (held, used, wasted seconds) to its bucket."""
    row = acc.get(key)
    if row is None:
        acc[key] = [hours[0], hours[1], hours[2]]
    else:
        row[0] += hours[0]
        row[1] += hours[1]
        row[2] += hours[2]


def add_capacity(cap: dict[CapacityKey, list[float]], key: CapacityKey, seconds: float, free: bool) -> None:
    """The GPU was observed for ``seconds``, all of them free (nothing allocated) or none."""
    c = cap.get(key)
    if c is None:
        c = cap[key] = [0.0, 0.0]
    c[0] += seconds
    if free:
        c[1] += seconds


CAPACITY_UPSERT: Final = """
INSERT INTO capacity (hour, host_id, gpu_id, observed, free) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (hour, host_id, gpu_id) DO UPDATE SET
    observed = observed + excluded.observed, free = free + excluded.free
"""

UPSERT: Final = """
INSERT INTO usage (hour, host_id, gpu_id, user, held, used, wasted) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, host_id, gpu_id, user) DO UPDATE SET
    held = held + excluded.held, used = used + excluded.used, wasted = wasted + excluded.wasted
"""


def upsert_rows(acc: dict[UsageKey, list[float]]) -> list[tuple[int, int, int, str, float, float, float]]:
    return [(k[0], k[1], k[2], k[3], v[0], v[1], v[2]) for k, v in acc.items()]


def usage_by_user(conn: sqlite3.Connection, *, since: float, until: float, host: str | None,
                  by_host: bool, gpu: int | None = None) -> list[UsageRow]:
    """GPU-hours per user (and per host with ``by_host``), most held first; ``gpu``: only that slot's GPU."""
    if until < since:
        return []
    first_hour = int(math.floor(since / 3600.0)) * 3600
    group = "u.user, h.name" if by_host else "u.user"
    sql = f"""
        SELECT u.user, {"h.name" if by_host else "NULL"}, sum(u.held), sum(u.used), sum(u.wasted)
        FROM usage u JOIN hosts h ON h.id = u.host_id JOIN gpus g ON g.id = u.gpu_id
        WHERE u.hour >= ?1 AND u.hour < ?2 AND (?3 IS NULL OR h.name = ?3) AND (?4 IS NULL OR g.idx = ?4)
        GROUP BY {group}
        ORDER BY sum(u.held) DESC, u.user
    """
    rows = conn.execute(sql, (first_hour, until, host, gpu)).fetchall()
    return [UsageRow(user=user, host=hname if by_host else host, gpu_hours_held=held / 3600.0,
                     gpu_hours_used=used / 3600.0, gpu_hours_wasted=wasted / 3600.0)
            for user, hname, held, used, wasted in rows]


def capacity(conn: sqlite3.Connection, *, since: float, until: float, host: str | None) -> list[CapacityRow]:
    """GPU-hours observed and free (nothing allocated) per host, hour granularity like the usage."""
    if until < since:
        return []
    first_hour = int(math.floor(since / 3600.0)) * 3600
    rows = conn.execute(
        """SELECT h.name, sum(c.observed), sum(c.free) FROM capacity c JOIN hosts h ON h.id = c.host_id
           WHERE c.hour >= ?1 AND c.hour < ?2 AND (?3 IS NULL OR h.name = ?3)
           GROUP BY h.name ORDER BY h.name""", (first_hour, until, host)).fetchall()
    return [CapacityRow(host=name, gpu_hours_observed=obs / 3600.0, gpu_hours_free=free / 3600.0)
            for name, obs, free in rows]
