"""GPU-hours accounting: who held which GPU, how much of that time it was busy, how much was wasted.

On each new snapshot, per GPU, the time since that GPU's previous sample (``dt``, capped so an outage is
not billed) is credited to every distinct user holding memory on it:
- held += dt;  used += dt * util / 100;  wasted += dt when :func:`classify.waste_users` names the user
  (the sample is idle or stuck and the user holds at least ``min_memory_mib``: the ``wasted`` rule's
  verdict with its configured thresholds; or the user's zombie still holds memory: ``stale``);
- memory in use with no process visible (``orphaned_memory``) stays held and wasted by the GPU's last
  holders;
- per GPU, ``capacity`` counts the seconds observed and the seconds free (:func:`classify.is_free`:
  nothing allocated), so the report shows idle capacity: GPU-hours nobody held.
Each user is credited the whole GPU (two users sharing one GPU both hold it), under the name the alerts use
(:func:`classify.user_of`). Sums live in hourly buckets, so a range query is a fast SUM at hour
granularity (a range is widened to whole hours).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Final

from gpufleet.collector.model import sample
from gpufleet.collector.model.classify import (
    holds_memory,
    is_free,
    orphaned_bytes,
    user_of,
    waste_users,
)
from gpufleet.collector.model.records import CapacityRow, UsageRow
from gpufleet.collector.model.thresholds import Thresholds

#: Never credit more than this many seconds for one sample, however long the gap before it.
MAX_GAP: Final = 10.0
#: ... nor more than this many times the GPU's typical sampling interval.
GAP_FACTOR: Final = 3.0

UsageKey = tuple[int, int, int, str]  # hour, host_id, gpu_id, user
CapacityKey = tuple[int, int, int]  # hour, host_id, gpu_id


def credit(dt: float, typical: float | None) -> tuple[float, float | None]:
    """Seconds to credit for a sample ``dt`` after the previous one, and the updated typical interval."""
    if dt <= 0:
        return 0.0, typical
    cap = MAX_GAP if typical is None else min(MAX_GAP, GAP_FACTOR * typical)
    if dt <= MAX_GAP:
        typical = dt if typical is None else 0.8 * typical + 0.2 * dt
    return min(dt, cap), typical


def account(acc: dict[UsageKey, list[float]], cap: dict[CapacityKey, list[float]], params: Thresholds,
            host_id: int, gpu_id: int, gpu: sample.GpuSample, ts: float, seconds: float,
            last_holders: frozenset[str],
            jobs: dict[UsageKey, list[float]] | None = None,
            waste: Sequence[str] | None = None) -> frozenset[str]:
    """Add one GPU sample's ``seconds`` to its holders (``acc``) and the GPU's capacity (``cap``), per hour.

    Wasted seconds go to the users :func:`classify.waste_users` names (the users of the ``wasted`` and
    ``stale`` alerts); memory in use with no process visible (``orphaned_memory``) is held and wasted by the
    GPU's ``last_holders``. Returns the holders to remember for the next sample.

    ``jobs`` (keyed by Slurm job id instead of user) gets the same seconds for each Slurm job holding memory,
    wasted when its process's user is wasting: one definition of waste for users and jobs. Orphaned memory
    stays with the users only (no process left, so no cgroup and no job id).

    ``waste``: :func:`classify.waste_users` of this sample already worked out (collector/model/facts.py).
    """
    if seconds <= 0 or gpu.error is not None:
        return last_holders
    hour = int(math.floor(ts / 3600.0)) * 3600
    c = cap.get((hour, host_id, gpu_id))
    if c is None:
        c = cap[(hour, host_id, gpu_id)] = [0.0, 0.0]
    c[0] += seconds
    if is_free(gpu, params):
        c[1] += seconds
    held: set[str] = set()
    job_users: dict[str, str] = {}
    for proc in gpu.processes:
        if not holds_memory(proc):
            continue
        user = user_of(proc)
        held.add(user)
        if proc.job is not None:
            job_users[proc.job] = user
    if held:
        util = gpu.util_gpu
        used = seconds * util / 100.0 if util is not None else 0.0
        wasting = set(waste_users(gpu, params) if waste is None else waste)
        for user in held:
            _add(acc, (hour, host_id, gpu_id, user), seconds, used, seconds if user in wasting else 0.0)
        if jobs is not None:
            for job, user in job_users.items():
                _add(jobs, (hour, host_id, gpu_id, job), seconds, used, seconds if user in wasting else 0.0)
        return frozenset(held)
    if last_holders and orphaned_bytes(gpu, params) is not None:
        for user in last_holders:  # their process is gone from the list; its memory is not
            _add(acc, (hour, host_id, gpu_id, user), seconds, 0.0, seconds)
        return last_holders
    return frozenset()


def _add(acc: dict[UsageKey, list[float]], key: UsageKey, held: float, used: float, wasted: float) -> None:
    row = acc.get(key)
    if row is None:
        acc[key] = [held, used, wasted]
    else:
        row[0] += held
        row[1] += used
        row[2] += wasted


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
