"""Raw samples read back: one GPU's series from its host's chunks and head parts, in time order.

Every reader of raw samples goes through here (history, the rollups, ``latest``, the migration's checks,
the tests): chunks in minute order, then the parts not compacted yet, a sample stored twice counted once
(its first writing, as :mod:`head` keeps it). Only the columns asked for are unpacked, and of a chunk only
the rows of the GPU asked for (:func:`chunkcodec.decode_columns`), so an hour of one GPU is 60 small reads.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

from gpufleet.collector.store import chunkcodec, chunkrows
from gpufleet.collector.store.chunkcodec import COLUMNS, Row
from gpufleet.collector.store.head import SPAN, span_of, stored_rows

#: The readings history charts and rollups read.
HISTORY_COLUMNS: tuple[int, ...] = tuple(COLUMNS.index(c) for c in ("util", "mem_used", "temp", "power"))


def _first_span(since: float) -> int:
    return span_of(since) if since > -1e300 else -(1 << 62)


def gpu_samples(conn: sqlite3.Connection, host_id: int, gpu_id: int, since: float, until: float,
                columns: Sequence[int] = HISTORY_COLUMNS,
                limit: int | None = None) -> tuple[list[float], dict[int, list[Any]]]:
    """(times, {column: values}) of one GPU's samples in [since, until], in time order. With ``limit``:
    may stop early once more than ``limit`` samples are found (a count that only needs to know that)."""
    times: list[float] = []
    cols: dict[int, list[Any]] = {c: [] for c in columns}
    for _span, data in chunkrows.scan(conn, host_id, _first_span(since), until):
        _, ts, got = chunkcodec.decode_columns(data, gpu_id, columns)
        if not ts:
            continue
        lo = bisect_left(ts, since) if ts[0] < since else 0
        hi = bisect_right(ts, until) if ts[-1] > until else len(ts)
        times += ts[lo:hi]
        for c in columns:
            cols[c] += got[c][lo:hi]
        if limit is not None and len(times) > limit:
            return times, cols
    extra = [r for (data,) in conn.execute(
                 "SELECT data FROM chunk_parts WHERE host_id = ? AND span >= ? AND span <= ? ORDER BY id",
                 (host_id, _first_span(since), until))
             for r in chunkcodec.decode_rows(data) if r[0] == gpu_id and since <= r[1] <= until]
    if not extra:
        return times, cols
    # parts: samples not compacted yet, possibly late ones between stored samples: merge, first kept
    rows: dict[float, tuple[Any, ...]] = {}
    for i, t in enumerate(times):
        rows[t] = tuple(cols[c][i] for c in columns)
    for r in extra:
        rows.setdefault(r[1], tuple(r[c + 1] for c in columns))
    order = sorted(rows)
    return order, {c: [rows[t][k] for t in order] for k, c in enumerate(columns)}


def sample_at(conn: sqlite3.Connection, host_id: int, gpu_id: int, ts: float,
              cache: dict[tuple[int, int], list[Row]] | None = None) -> Row | None:
    """One GPU's stored sample at exactly ``ts`` (its first writing), or None."""
    key = (host_id, span_of(ts))
    rows = cache.get(key) if cache is not None else None
    if rows is None:
        rows = list(stored_rows(conn, *key))
        if cache is not None:
            cache[key] = rows
    return next((r for r in rows if r[0] == gpu_id and r[1] == ts), None)


def host_rows(conn: sqlite3.Connection, host_id: int, since: float, until: float) -> list[Row]:
    """Every stored sample of a host's GPUs in [since, until] (first writings), sorted by (gpu, time)."""
    out: list[Row] = []
    for (span,) in conn.execute("SELECT span FROM chunks WHERE host_id = ?1 AND span >= ?2 AND span <= ?3 "
                                "AND piece = 0 UNION SELECT span FROM chunk_parts WHERE host_id = ?1 "
                                "AND span >= ?2 AND span <= ?3 ORDER BY 1",
                                (host_id, _first_span(since), min(until, 1e300))):
        out += (r for r in chunkcodec.normalize(stored_rows(conn, host_id, span)) if since <= r[1] <= until)
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def all_rows(conn: sqlite3.Connection) -> list[Row]:
    """Every stored raw sample, sorted by (gpu, time): the old ``samples`` table's rows (tests, checks)."""
    out: list[Row] = []
    for (hid,) in conn.execute("SELECT DISTINCT host_id FROM chunks WHERE piece = 0 UNION "
                               "SELECT DISTINCT host_id FROM chunk_parts"):
        out += host_rows(conn, hid, float("-inf"), float("inf"))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def newest_stored(conn: sqlite3.Connection, host_id: int, gpu_id: int, upto: float) -> float | None:
    """The time of the GPU's newest stored sample at or before ``upto`` (minute by minute, newest first)."""
    spans = conn.execute("SELECT span FROM chunks WHERE host_id = ?1 AND span <= ?2 AND piece = 0 UNION "
                         "SELECT span FROM chunk_parts WHERE host_id = ?1 AND span <= ?2 ORDER BY 1 DESC",
                         (host_id, upto)).fetchall()
    for (span,) in spans:
        found = [r[1] for r in stored_rows(conn, host_id, span) if r[0] == gpu_id and r[1] <= upto]
        if found:
            return float(max(found))
    return None


__all__ = ["SPAN", "all_rows", "gpu_samples", "host_rows", "newest_stored", "sample_at"]
