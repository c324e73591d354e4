"""Slurm jobs in the store: what the agents' scontrol said of each job id (``slurm_jobs``), and GPU-hours
per job (``slurm_usage``: held, used, wasted, allocated and unused) grouped by account, partition or user for
the report.

Ingest cost stays low: :class:`SlurmSeen` remembers what was last written per (host, job), so a row is
written only when Slurm's answer changes, or to move ``last_seen`` on at most once a minute. A job whose
name resolves late keeps its usage: ``slurm_usage`` is keyed by job id and joined to the names at query time.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from typing import Final

from gpufleet.collector.model import sample
from gpufleet.collector.model.records import SlurmJobRow, SlurmUsageRow
from gpufleet.collector.store.usage import UsageKey

#: ``last_seen`` of an unchanged job is written at most this often (seconds).
SEEN_EVERY: Final = 60.0

Facts = tuple[str | None, str | None, str | None, str | None, str | None]  # name user account partition state
JobRow = tuple[int, str, str | None, str | None, str | None, str | None, str | None, float, float]

JOB_UPSERT: Final = """
INSERT INTO slurm_jobs (host_id, job, name, user, account, partition, state, first_seen, last_seen)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (host_id, job) DO UPDATE SET
    name = coalesce(excluded.name, name), user = coalesce(excluded.user, user),
    account = coalesce(excluded.account, account), partition = coalesce(excluded.partition, partition),
    state = coalesce(excluded.state, state),
    first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)
"""

USAGE_UPSERT: Final = """
INSERT INTO slurm_usage (hour, host_id, gpu_id, job, held, used, wasted) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, host_id, gpu_id, job) DO UPDATE SET
    held = held + excluded.held, used = used + excluded.used, wasted = wasted + excluded.wasted
"""


@dataclass(slots=True)
class SlurmSeen:
    """What was last written per (host id, job id); the writer's thread only. Cleared with the ingest
    state after a rollback (the next sighting writes again: the upsert makes that harmless)."""

    last: dict[tuple[int, str], tuple[Facts, float]] = field(default_factory=dict)

    def note(self, rows: dict[tuple[int, str], JobRow], host_id: int, p: sample.ProcessSample,
             ts: float) -> None:
        """Queue a ``slurm_jobs`` row for ``p``'s job when its facts changed or last_seen is due."""
        if p.job is not None:
            self._note(rows, host_id, p.job, (p.job_name, p.job_user, p.job_account, p.job_partition,
                                              p.job_state), ts)

    def note_allocation(self, rows: dict[tuple[int, str], JobRow], host_id: int, a: sample.SlurmAllocation,
                        ts: float) -> None:
        """The same for a job holding GPUs (a job that runs no process on any GPU is known only so)."""
        self._note(rows, host_id, a.job, (a.name, a.user, a.account, a.partition, a.state), ts)

    def _note(self, rows: dict[tuple[int, str], JobRow], host_id: int, job: str, facts: Facts,
              ts: float) -> None:
        key = (host_id, job)
        known = self.last.get(key)
        if known is not None and known[0] == facts and ts - known[1] < SEEN_EVERY:
            return
        self.last[key] = (facts, ts)
        queued = rows.get(key)
        first = ts if queued is None else min(queued[7], ts)
        rows[key] = (host_id, job, *facts, first, ts)

    def clear(self) -> None:
        self.last.clear()


def write_jobs(conn: sqlite3.Connection, jobs: dict[tuple[int, str], JobRow]) -> None:
    """A batch's ``slurm_jobs`` rows (SlurmSeen.note queued them)."""
    if jobs:
        conn.executemany(JOB_UPSERT, list(jobs.values()))


def write_usage(conn: sqlite3.Connection, usage: dict[UsageKey, list[float]]) -> None:
    """GPU-hours per job, added to what is stored (the running totals: write each once)."""
    if usage:
        conn.executemany(USAGE_UPSERT, [(*k, *v) for k, v in usage.items()])


ALLOCATED_UPSERT: Final = """
INSERT INTO slurm_usage (hour, host_id, gpu_id, job, held, used, wasted, allocated, unused)
VALUES (?, ?, ?, ?, 0, 0, 0, ?, ?)
ON CONFLICT (hour, host_id, gpu_id, job) DO UPDATE SET
    allocated = allocated + excluded.allocated, unused = unused + excluded.unused
"""


def write_allocated(conn: sqlite3.Connection, allocated: dict[UsageKey, list[float]]) -> None:
    """Seconds allocated to running Slurm jobs and unused by them (schema v7), added like write_usage."""
    if allocated:
        conn.executemany(ALLOCATED_UPSERT, [(*k, *v) for k, v in allocated.items()])


UNRESOLVED: Final = "(unresolved)"
#: What GPU-hours per Slurm job are grouped by: the job's account, partition, or user (as Slurm says them).
GROUPS: Final = ("account", "partition", "user")


def usage_by(conn: sqlite3.Connection, group: str, *, since: float, until: float,
             host: str | None) -> list[SlurmUsageRow]:
    """GPU-hours per Slurm ``group`` (one of GROUPS): held, used, wasted, and allocated to running jobs and
    unused by them; most held, then most allocated, first."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}")
    if until < since:
        return []
    first_hour = int(math.floor(since / 3600.0)) * 3600
    rows = conn.execute(f"""
        SELECT coalesce(j.{group}, ?4), sum(u.held), sum(u.used), sum(u.wasted),
               count(DISTINCT u.host_id || ':' || u.job), sum(u.allocated), sum(u.unused)
        FROM slurm_usage u JOIN hosts h ON h.id = u.host_id
        LEFT JOIN slurm_jobs j ON j.host_id = u.host_id AND j.job = u.job
        WHERE u.hour >= ?1 AND u.hour < ?2 AND (?3 IS NULL OR h.name = ?3)
        GROUP BY 1 ORDER BY sum(u.held) DESC, sum(u.allocated) DESC, 1""",
                        (first_hour, until, host, UNRESOLVED)).fetchall()
    return [SlurmUsageRow(str(name), held / 3600.0, used / 3600.0, wasted / 3600.0, int(n),
                          allocated / 3600.0, unused / 3600.0)
            for name, held, used, wasted, n, allocated, unused in rows]


def jobs_of(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], SlurmJobRow]:
    """The stored Slurm facts of (host name, job id) pairs (history and the jobs list name their jobs)."""
    out: dict[tuple[str, str], SlurmJobRow] = {}
    for host, job in set(keys):
        r = conn.execute("SELECT j.name, j.user, j.account, j.partition, j.state, j.first_seen, j.last_seen "
                         "FROM slurm_jobs j JOIN hosts h ON h.id = j.host_id WHERE h.name = ? AND j.job = ?",
                         (host, job)).fetchone()
        if r is not None:
            out[(host, job)] = SlurmJobRow(host, job, *r)
    return out
