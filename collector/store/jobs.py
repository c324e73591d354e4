"""The ``jobs`` table (schema v4; v7 adds a Slurm job's allocated GPUs and hours): per-job efficiency records,
written once when a job ends."""

from __future__ import annotations

import json
import sqlite3
from typing import Final

from gpufleet.collector.model.records import POD_FIELDS, JobRecord

UPSERT: Final = """
INSERT INTO jobs (job_key, user, command, hosts, gpus, started, ended, gpu_hours, mean_util, peak_util,
    peak_memory, waste_pct, diagnoses, gpus_allocated, allocated_hours, unused_hours, pod)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_key, started) DO UPDATE SET
    user = excluded.user, command = excluded.command, hosts = excluded.hosts, gpus = excluded.gpus,
    ended = excluded.ended, gpu_hours = excluded.gpu_hours, mean_util = excluded.mean_util,
    peak_util = excluded.peak_util, peak_memory = excluded.peak_memory, waste_pct = excluded.waste_pct,
    diagnoses = excluded.diagnoses, gpus_allocated = excluded.gpus_allocated,
    allocated_hours = excluded.allocated_hours, unused_hours = excluded.unused_hours, pod = excluded.pod
"""
_COLUMNS: Final = ("job_key, user, command, hosts, gpus, started, ended, gpu_hours, mean_util, peak_util, "
                   "peak_memory, waste_pct, diagnoses, gpus_allocated, allocated_hours, unused_hours, pod")


#: What Slurm said of a "slurm:ID" record's job (any host's answer: a job id is the cluster's).
_SLURM: Final = ", ".join(
    f"(SELECT s.{c} FROM slurm_jobs s WHERE jobs.job_key LIKE 'slurm:%' AND s.job = substr(jobs.job_key, 7) "
    f"AND s.{c} IS NOT NULL LIMIT 1)" for c in ("name", "account", "partition"))


def save(conn: sqlite3.Connection, records: list[JobRecord]) -> None:
    conn.executemany(UPSERT, [
        (r.key, r.user, r.command, json.dumps(r.hosts), json.dumps(r.gpus), r.started, r.ended, r.gpu_hours,
         r.mean_util, r.peak_util, r.peak_memory, r.waste_pct, json.dumps(r.diagnoses),
         json.dumps(r.gpus_allocated), r.gpu_hours_allocated, r.gpu_hours_unused, _pod(r))
        for r in records])


def _pod(r: JobRecord) -> str | None:
    return json.dumps([r.pod_namespace, r.pod_name, r.container_name]) if r.pod_name else None


def _from_pod(text: str | None) -> tuple[str | None, str | None, str | None]:
    """The pod's names back (a value this code did not write reads as none)."""
    try:
        ns, name, container = json.loads(text) if text else (None, None, None)
    except (ValueError, TypeError):
        return None, None, None
    return ns, name, container


def load(conn: sqlite3.Connection, *, since: float, until: float, user: str | None = None,
         limit: int = 1000) -> list[JobRecord]:
    """Jobs that ended in [since, until], newest first (``user``: only theirs)."""
    sql = f"SELECT {_COLUMNS}, {_SLURM} FROM jobs WHERE ended >= ? AND ended <= ?"
    params: list[object] = [since, until]
    if user is not None:
        sql += " AND user = ?"
        params.append(user)
    sql += " ORDER BY ended DESC LIMIT ?"
    params.append(limit)
    return [JobRecord(key=row[0], user=row[1], command=row[2], hosts=json.loads(row[3]),
                      gpus=json.loads(row[4]), started=row[5], ended=row[6], gpu_hours=row[7],
                      mean_util=row[8], peak_util=row[9], peak_memory=row[10], waste_pct=row[11],
                      diagnoses=json.loads(row[12]), gpus_allocated=json.loads(row[13]),
                      gpu_hours_allocated=row[14], gpu_hours_unused=row[15], slurm_name=row[17],
                      slurm_account=row[18], slurm_partition=row[19],
                      **dict(zip(POD_FIELDS, _from_pod(row[16]), strict=True)))
            for row in conn.execute(sql, params)]

