"""Reads for the CLI, the query API and the alert engine: plain functions over a sqlite3 connection.

They run on the store's read connection (its own thread; WAL readers never wait on the writer) and return
the dataclasses of :mod:`records`. History picks its resolution (:func:`choose_resolution`): raw samples when
the range is within raw retention and has at most ``max_points`` samples, else 1-minute or 1-hour rollups,
merged into wider steps when there would still be more than ``max_points`` points. The part of a range not
rolled up yet (the last minute or two) is aggregated from the finer table on the fly, so recent history is
never missing. Raw samples come from chunks (store/raw.py); where they join rolled-up rows in one point,
that point is aggregated here exactly as the SQL over the old raw table did (store/sqlagg.py).
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import (
    AlertRecord,
    EventRow,
    GpuSeries,
    ProcessSpan,
    RawSeries,
    SeriesPoint,
    SilenceRecord,
)
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.store import raw, sqlagg
from gpufleet.collector.store.chunkcodec import COLUMNS

#: A 1-minute base is used up to this many minutes per point before switching to the 1-hour table.
MAX_MINUTE_STEP: Final = 4


def meta_float(conn: sqlite3.Connection, key: str) -> float | None:
    """A number kept in ``meta``; None when absent or not a finite number (an old or hand-edited file)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    try:
        value = None if row is None or row[0] is None else float(row[0])
    except (TypeError, ValueError):
        return None
    return value if value is not None and math.isfinite(value) else None


# -------------------------------------------------------------------------------------------- fleet


def hosts(conn: sqlite3.Connection) -> list[HostRecord]:
    rows = conn.execute("SELECT name, status, reason, last_seen, agent_version, driver_version, tags, since, "
                        "nvml_version, cuda_version, reported_hostname, backend "
                        "FROM hosts ORDER BY name").fetchall()
    return [HostRecord(r[0], r[1], r[2], r[3], r[4], r[5], list(json.loads(r[6] or "[]")), *r[7:])
            for r in rows]


def latest(conn: sqlite3.Connection, host: str | None) -> dict[str, sample.Snapshot]:
    """Each host's newest sample of each GPU slot (the most recently seen GPU where a slot had several),
    with the processes seen in it, as the host's last snapshot (its time: the newest of them; GPUs by
    index). The same sample type the live view holds, so status reads stored and live state alike."""
    gpus = conn.execute(
        """SELECT h.name, g.id, g.host_id, g.idx, g.uuid, g.name, g.memory_total, g.power_limit, g.last_sample
           FROM gpus g JOIN hosts h ON h.id = g.host_id
           WHERE (?1 IS NULL OR h.name = ?1) AND g.last_sample IS NOT NULL
           ORDER BY h.name, g.idx, g.last_sample DESC""", (host,)).fetchall()
    cache: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
    rows = []
    for hname, gid, hid, idx, uuid, name, total, limit, ts in gpus:
        found = raw.sample_at(conn, hid, gid, ts, cache)
        if found is not None:  # util, mem_used, temp, power, error
            rows.append((hname, gid, idx, uuid, name, total, limit, ts, found[2], found[4], found[5],
                         found[6], found[13]))
    out: dict[str, sample.Snapshot] = {}
    seen: set[tuple[str, int]] = set()
    for (hname, gid, idx, uuid, name, total, limit, ts, util, mem, temp, power, error) in rows:
        if (hname, idx) in seen:
            continue
        seen.add((hname, idx))
        procs = conn.execute(
            "SELECT p.pid, p.user, p.command, p.gpu_memory, p.sm_util, p.start_time, p.start_known, p.state, "
            "p.container, p.job, j.name, j.user, j.account, j.partition, j.state FROM processes p "
            "LEFT JOIN slurm_jobs j ON j.host_id = p.host_id AND j.job = p.job "
            "WHERE p.gpu_id = ? AND p.last_seen = ? ORDER BY p.pid", (gid, ts)).fetchall()
        gpu = sample.GpuSample(
            index=idx, uuid=uuid, name=name, util_gpu=util, memory_used=mem, memory_total=total,
            temperature=temp, power_draw=power, power_limit=limit, error=error,
            processes=[sample.ProcessSample(pid=p[0], user=p[1], command=p[2], gpu_memory=p[3], sm_util=p[4],
                                            start_time=p[5] if p[6] else None, state=p[7], container=p[8],
                                            job=p[9], job_name=p[10], job_user=p[11], job_account=p[12],
                                            job_partition=p[13], job_state=p[14])
                       for p in procs])
        snap = out.get(hname)
        if snap is None:
            out[hname] = sample.Snapshot(proto=wire.PROTO_VERSION, ts=ts, seq=0, gpus=[gpu])
        else:
            snap.gpus.append(gpu)
            snap.ts = max(snap.ts, ts)
    return out


# ------------------------------------------------------------------------------------------ history


@dataclass(slots=True, frozen=True)
class Resolution:
    name: str  # raw | 1m | 1h
    step: float | None  # seconds per point; None for raw


@dataclass(slots=True, frozen=True)
class _Gpu:
    id: int
    idx: int
    uuid: str
    name: str | None
    memory_total: int | None
    host: str
    host_id: int  # whose chunks hold its raw samples


def _history_gpus(conn: sqlite3.Connection, host: str, gpu: int | None, since: float,
                  until: float) -> list[_Gpu]:
    """GPUs that sat on ``host`` (in slot ``gpu``) at some time in the range, wherever they are now."""
    rows = conn.execute(
        """WITH pl AS (
               SELECT gpu_id, host_id, idx, since,
                      lead(since) OVER (PARTITION BY gpu_id ORDER BY since) AS next
               FROM gpu_placements)
           SELECT DISTINCT g.id, g.idx, g.uuid, g.name, g.memory_total, hc.name, g.host_id
           FROM pl JOIN gpus g ON g.id = pl.gpu_id
           JOIN hosts hp ON hp.id = pl.host_id JOIN hosts hc ON hc.id = g.host_id
           WHERE hp.name = ?1 AND (?2 IS NULL OR pl.idx = ?2)
             AND pl.since <= ?4 AND coalesce(pl.next, g.last_seen) >= ?3
           ORDER BY g.idx, g.id""", (host, gpu, since, until)).fetchall()
    return [_Gpu(*r) for r in rows]


def choose_resolution(conn: sqlite3.Connection, gpus: list[_Gpu], since: float, until: float,
                      max_points: int) -> Resolution:
    span = until - since
    raw_from = meta_float(conn, "raw_from")
    if raw_from is None or since >= raw_from:
        busiest = 0
        for g in gpus:
            ts, _ = raw.gpu_samples(conn, g.host_id, g.id, since, until, (), limit=max_points)
            busiest = max(busiest, len(ts))
            if busiest > max_points:
                break
        if busiest <= max_points:
            return Resolution("raw", None)
    m1_from = meta_float(conn, "m1_from")
    minutes = span / 60.0
    if (m1_from is None or since >= m1_from) and minutes <= max_points * MAX_MINUTE_STEP:
        return Resolution("1m", 60.0 * max(1, math.ceil(minutes / max_points)))
    return Resolution("1h", 3600.0 * max(1, math.ceil(span / 3600.0 / max_points)))


# Rows of the finer tables in a common shape: bucket, n, util_mean, util_max, mem_mean, mem_max, temp_max,
# power_mean. Means merge weighted by n (exact unless a metric is missing for part of a bucket). Raw samples
# join them in Python (_tail): only buckets before ?7 are aggregated here.
_ROLLED: Final = """
SELECT (bucket / ?1) * ?1 AS b, sum(n),
       sum(util_mean * n) / sum(CASE WHEN util_mean IS NOT NULL THEN n END), max(util_max),
       sum(mem_mean * n) / sum(CASE WHEN mem_mean IS NOT NULL THEN n END), max(mem_max),
       max(temp_max),
       sum(power_mean * n) / sum(CASE WHEN power_mean IS NOT NULL THEN n END)
FROM (
    SELECT bucket, n, util_mean, util_max, mem_mean, mem_max, temp_max, power_mean FROM samples_1h
    WHERE gpu_id = ?2 AND bucket >= ?3 AND bucket <= ?4 AND bucket < ?5 AND bucket < ?7
    UNION ALL
    SELECT bucket, n, util_mean, util_max, mem_mean, mem_max, temp_max, power_mean FROM samples_1m
    WHERE gpu_id = ?2 AND bucket >= max(?3, ?5) AND bucket <= ?4 AND bucket < ?6 AND bucket < ?7
)
GROUP BY b ORDER BY b
"""
# The same rows, one by one, of the buckets from ?7 on: the points raw samples may join.
_ROLLED_ROWS: Final = """
SELECT bucket, n, util_mean, util_max, mem_mean, mem_max, temp_max, power_mean FROM samples_1h
WHERE gpu_id = ?2 AND bucket >= ?3 AND bucket <= ?4 AND bucket < ?5 AND bucket >= ?7
UNION ALL
SELECT bucket, n, util_mean, util_max, mem_mean, mem_max, temp_max, power_mean FROM samples_1m
WHERE gpu_id = ?2 AND bucket >= max(?3, ?5) AND bucket <= ?4 AND bucket < ?6 AND bucket >= ?7
"""
_HISTORY: Final = tuple(COLUMNS.index(c) for c in ("util", "mem_used", "temp", "power"))


def _real(v: Any) -> Any:
    """A raw reading as the rolled-up tables' REAL columns give it (the SQL union's affinity)."""
    return float(v) if type(v) is int else v


def _tail(conn: sqlite3.Connection, g: _Gpu, step: int, lo: int, until: float, h1_upto: float,
          m1_upto: float, edge: int) -> list[SeriesPoint]:
    """The points from bucket ``edge`` on: rolled-up rows and raw samples (ts >= max(lo, h1_upto, m1_upto)),
    grouped and aggregated as the old single query did, in its row order (1h, 1m, raw by time)."""
    groups: dict[int, list[tuple[Any, ...]]] = {}
    for r in conn.execute(_ROLLED_ROWS, (step, g.id, lo, until, h1_upto, m1_upto, edge)):
        groups.setdefault(int(r[0]) // step * step, []).append(r[1:])
    since = max(lo, h1_upto, m1_upto)
    ts, cols = raw.gpu_samples(conn, g.host_id, g.id, since, until, _HISTORY)
    util, mem, temp, power = (cols[c] for c in _HISTORY)
    for i, t in enumerate(ts):
        b = int(t / 60) * 60 // step * step
        u, m = _real(util[i]), _real(mem[i])
        groups.setdefault(b, []).append((1, u, u, m, m, _real(temp[i]), _real(power[i])))
    points = []
    for b in sorted(groups):
        rows = groups[b]
        means = []
        for k in (1, 3, 6):  # util_mean, mem_mean, power_mean
            weighted = sqlagg.sum_([r[k] * r[0] for r in rows if r[k] is not None])
            count = sqlagg.sum_([r[0] for r in rows if r[k] is not None])
            means.append(None if weighted is None or count is None else weighted / count)
        maxes = [max((r[k] for r in rows if r[k] is not None), default=None) for k in (2, 4, 5)]
        points.append(SeriesPoint(ts=float(b), util_mean=means[0], util_max=maxes[0], mem_used_mean=means[1],
                                  mem_used_max=maxes[1], temp_max=maxes[2], power_mean=means[2]))
    return points


def _series_points(conn: sqlite3.Connection, g: _Gpu, res: Resolution, since: float,
                   until: float) -> list[SeriesPoint]:
    if res.step is None:
        ts, cols = raw.gpu_samples(conn, g.host_id, g.id, since, until, _HISTORY)
        util, mem, temp, power = (cols[c] for c in _HISTORY)
        return [SeriesPoint(ts=t, util_mean=util[i], util_max=util[i], mem_used_mean=mem[i],
                            mem_used_max=mem[i], temp_max=temp[i], power_mean=power[i])
                for i, t in enumerate(ts)]
    step = int(res.step)
    lo = int(math.floor(since / step)) * step
    m1_upto = meta_float(conn, "m1_upto") or 0.0
    # a 1-minute series does not read the hour table: every minute in it is finer than an hour
    h1_upto = (meta_float(conn, "h1_upto") or 0.0) if res.name == "1h" else 0.0
    first_raw = max(lo, h1_upto, m1_upto)
    edge = int(first_raw / 60) * 60 // step * step  # the first bucket a raw sample can fall in
    rows = conn.execute(_ROLLED, (step, g.id, lo, until, h1_upto, m1_upto, edge)).fetchall()
    return [SeriesPoint(ts=float(r[0]), util_mean=r[2], util_max=r[3], mem_used_mean=r[4],
                        mem_used_max=r[5], temp_max=r[6], power_mean=r[7]) for r in rows] + \
        _tail(conn, g, step, lo, until, h1_upto, m1_upto, edge)


def gpu_history(conn: sqlite3.Connection, host: str, *, gpu: int | None, since: float, until: float,
                max_points: int) -> list[GpuSeries]:
    """One series per GPU of ``host`` (or slot ``gpu``), all at the same resolution so they line up.

    A GPU that moved keeps its whole history (by UUID); ``host`` / ``index`` in a series say where it is now.
    """
    if until < since or max_points < 1:
        return []
    found = _history_gpus(conn, host, gpu, since, until)
    if not found:
        return []
    res = choose_resolution(conn, found, since, until, max_points)
    return [GpuSeries(host=g.host, index=g.idx, uuid=g.uuid, name=g.name, resolution=res.name,
                      memory_total=g.memory_total, points=_series_points(conn, g, res, since, until),
                      step=res.step)
            for g in found]


def raw_history(conn: sqlite3.Connection, host: str, *, gpu: int, since: float,
                until: float) -> list[RawSeries]:
    """Every raw sample of GPU ``gpu`` of ``host`` in [since, until], as columns (no per-point objects):
    what a chart of up to an hour at 1 s wants. Empty where raw retention has dropped them."""
    if until < since:
        return []
    out = []
    for g in _history_gpus(conn, host, gpu, since, until):
        ts, cols = raw.gpu_samples(conn, g.host_id, g.id, since, until, _HISTORY)
        util, mem, temp, power = (cols[c] for c in _HISTORY)
        out.append(RawSeries(host=g.host, index=g.idx, uuid=g.uuid, name=g.name, memory_total=g.memory_total,
                             ts=ts, util=util, mem_used=mem, temp=temp, power=power))
    return out


def fleet_history(conn: sqlite3.Connection, *, since: float, until: float,
                  max_points: int) -> list[GpuSeries]:
    """Every GPU's series over the range, each host's as :func:`gpu_history` reads it (a GPU that moved
    between hosts once): what the web page's fleet chart counts busy, idle and wasted GPUs from. Built on
    gpu_history only, so a new layout of the raw samples serves it as it serves a GPU's history."""
    out: dict[str, GpuSeries] = {}
    for h in hosts(conn):
        for s in gpu_history(conn, h.name, gpu=None, since=since, until=until, max_points=max_points):
            out.setdefault(s.uuid, s)
    return list(out.values())


# ---------------------------------------------------------------------------------------- processes


def process_history(conn: sqlite3.Connection, *, host: str | None, gpu: int | None, user: str | None,
                    since: float, until: float) -> list[ProcessSpan]:
    """Process spans overlapping the range. ``user="?"`` selects processes nobody could be attributed to."""
    rows = conn.execute(
        """SELECT h.name, p.gpu_idx, g.uuid, p.pid, p.user, p.command, p.first_seen, p.last_seen,
                  p.max_gpu_memory, p.sm_sum / nullif(p.sm_count, 0), p.container, p.job,
                  j.name, j.account, j.partition, j.state, CASE WHEN p.start_known THEN p.start_time END
           FROM processes p JOIN gpus g ON g.id = p.gpu_id JOIN hosts h ON h.id = p.host_id
           LEFT JOIN slurm_jobs j ON j.host_id = p.host_id AND j.job = p.job
           WHERE p.last_seen >= ?1 AND p.first_seen <= ?2
             AND (?3 IS NULL OR h.name = ?3) AND (?4 IS NULL OR p.gpu_idx = ?4)
             AND (?5 IS NULL OR (?5 = '?' AND p.user IS NULL) OR p.user = ?5)
           ORDER BY p.first_seen, h.name, p.gpu_idx, p.pid""",
        (since, until, host, gpu, user)).fetchall()
    return [ProcessSpan(host=r[0], gpu_index=r[1], uuid=r[2], pid=r[3], user=r[4], command=r[5],
                        first_seen=r[6], last_seen=r[7], max_gpu_memory=r[8], mean_sm_util=r[9],
                        container=r[10], job=r[11], job_name=r[12], job_account=r[13], job_partition=r[14],
                        job_state=r[15], started=r[16]) for r in rows]


def events(conn: sqlite3.Connection, *, host: str | None, since: float, until: float) -> list[EventRow]:
    rows = conn.execute(
        """SELECT h.name, e.ts, e.kind, e.message, e.gpu_index, e.uuid, e.xid
           FROM events e JOIN hosts h ON h.id = e.host_id
           WHERE e.ts >= ?1 AND e.ts <= ?2 AND (?3 IS NULL OR h.name = ?3)
           ORDER BY e.ts, e.id""", (since, until, host)).fetchall()
    return [EventRow(host=r[0], ts=r[1], kind=r[2], message=r[3], gpu_index=r[4], uuid=r[5], xid=r[6])
            for r in rows]


# ---------------------------------------------------------------------------------- alerts, silences

_ALERT_COLS: Final = ("fingerprint, rule, severity, state, labels, annotations, started_at, fired_at, "
                      "resolved_at, last_notified_at, updated_at, value")


def load_alerts(conn: sqlite3.Connection, *, active_only: bool, since: float | None) -> list[AlertRecord]:
    params: list[float]
    if active_only:
        where, params = "state IN ('pending', 'firing')", []
    elif since is None:
        where, params = "1", []
    else:
        where, params = "state IN ('pending', 'firing') OR resolved_at >= ?", [since]
    rows = conn.execute(f"SELECT {_ALERT_COLS} FROM alerts WHERE {where} ORDER BY started_at, fingerprint",
                        params).fetchall()
    return [AlertRecord(fingerprint=r[0], rule=r[1], severity=r[2], state=r[3], labels=json.loads(r[4]),
                        annotations=json.loads(r[5]), started_at=r[6], fired_at=r[7], resolved_at=r[8],
                        last_notified_at=r[9], updated_at=r[10], value=r[11]) for r in rows]


def list_silences(conn: sqlite3.Connection, *, include_expired: bool, now: float) -> list[SilenceRecord]:
    where = "1" if include_expired else "ends_at > ?"
    params: tuple[float, ...] = () if include_expired else (now,)
    rows = conn.execute("SELECT id, matchers, starts_at, ends_at, created_by, comment, created_at "
                        f"FROM silences WHERE {where} ORDER BY id", params).fetchall()
    return [SilenceRecord(id=r[0], matchers=json.loads(r[1]), starts_at=r[2], ends_at=r[3], created_by=r[4],
                          comment=r[5], created_at=r[6]) for r in rows]


# ------------------------------------------------------------------------- writes (run by the writer)


def save_alerts(conn: sqlite3.Connection, alerts: list[AlertRecord]) -> None:
    conn.executemany(
        f"""INSERT INTO alerts ({_ALERT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (fingerprint) DO UPDATE SET
              rule = excluded.rule, severity = excluded.severity, state = excluded.state,
              labels = excluded.labels, annotations = excluded.annotations, started_at = excluded.started_at,
              fired_at = excluded.fired_at, resolved_at = excluded.resolved_at,
              last_notified_at = excluded.last_notified_at, updated_at = excluded.updated_at,
              value = excluded.value""",
        [(a.fingerprint, a.rule, a.severity, a.state, json.dumps(a.labels, sort_keys=True),
          json.dumps(a.annotations, sort_keys=True), a.started_at, a.fired_at, a.resolved_at,
          a.last_notified_at, a.updated_at, a.value) for a in alerts])


def add_silence(conn: sqlite3.Connection, s: SilenceRecord) -> int:
    cur = conn.execute(
        "INSERT INTO silences (matchers, starts_at, ends_at, created_by, comment, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (json.dumps(s.matchers, sort_keys=True), s.starts_at, s.ends_at, s.created_by, s.comment,
         s.created_at))
    return int(cur.lastrowid or 0)


def expire_silence(conn: sqlite3.Connection, silence_id: int, now: float) -> bool:
    cur = conn.execute("UPDATE silences SET ends_at = ? WHERE id = ? AND ends_at > ?", (now, silence_id, now))
    return cur.rowcount > 0
