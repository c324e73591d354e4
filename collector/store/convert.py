"""Schema v8's conversion: the raw samples of a file written before chunks (one row per GPU per second in
``samples``) become chunks, inside the migration's one transaction (store/schema.py): if anything fails the
file stays as it was, at its old version, and the error says what failed.

Host by host, an hour at a time (memory stays bounded on a large file), each GPU's rows read by their key
in time order. Rows no store writes (a time outside the store's window, or no number: what store/sweep.py
would delete at the first maintenance) and rows of GPUs the file no longer lists (no reader could reach
them) are left behind with the table, and counted in the log. Everything else keeps its values, exactly.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Final

from gpufleet.collector.store import chunkcodec, chunkrows
from gpufleet.collector.store.admit import window
from gpufleet.collector.store.chunkcodec import Row
from gpufleet.collector.store.head import by_span

log = logging.getLogger(__name__)

#: Seconds of samples read at a time per host.
WINDOW: Final = 3600
#: Seconds between two log lines saying how far the conversion is.
PROGRESS_EVERY: Final = 30.0
#: How far ahead of the clock a stored time may lie and still be kept (store/sweep.py keeps as much).
AHEAD: Final = 86400.0
_SELECT: Final = ("SELECT gpu_id, ts, util, util_mem, mem_used, temp, power, clock_sm, clock_mem, fan, "
                  "ecc_corrected, ecc_uncorrected, throttle, error FROM samples "
                  "WHERE gpu_id = ? AND ts >= ? AND ts < ? ORDER BY ts")


def _next_hour(conn: sqlite3.Connection, gids: list[int], after: float, hi: float) -> float | None:
    """The start of the first hour at or after ``after`` in which one of the GPUs has a sample (or None)."""
    found = [row[0] for gid in gids for row in conn.execute(
        "SELECT min(ts) FROM samples WHERE gpu_id = ? AND ts >= ? AND ts <= ?", (gid, after, hi))]
    first = min((t for t in found if t is not None), default=None)
    return None if first is None else max(after, int(first // WINDOW) * WINDOW)


def samples_to_chunks(conn: sqlite3.Connection) -> None:
    """The v7 -> v8 step: every reachable raw sample into its host's chunks."""
    lo, hi = window(time.time(), AHEAD)
    hosts: dict[int, list[int]] = {}
    for gid, hid in conn.execute("SELECT id, host_id FROM gpus ORDER BY id"):
        hosts.setdefault(int(hid), []).append(int(gid))
    total = int(conn.execute("SELECT count(*) FROM samples").fetchone()[0])
    moved = 0
    started = said = time.monotonic()
    for n, (hid, gids) in enumerate(sorted(hosts.items()), start=1):
        bounds = [conn.execute("SELECT min(ts), max(ts) FROM samples WHERE gpu_id = ? AND ts >= ? "
                               "AND ts <= ?", (gid, lo, hi)).fetchone() for gid in gids]
        firsts = [b[0] for b in bounds if b[0] is not None]
        if not firsts:
            continue
        start: float | None = int(min(firsts) // WINDOW) * WINDOW
        while start is not None:
            rows: list[Row] = []
            for gid in gids:
                rows += conn.execute(_SELECT, (gid, max(start, lo), min(start + WINDOW, hi + 1e-6)))
            chunks = []
            for span, group in by_span(rows).items():
                merged = chunkcodec.normalize(group)
                chunks.append((hid, span, len(merged), chunkcodec.encode(merged)))
            chunkrows.insert(conn, chunks)
            moved += len(rows)
            start = _next_hour(conn, gids, start + WINDOW, hi)  # over hours without samples in one step
        if time.monotonic() - said >= PROGRESS_EVERY:
            said = time.monotonic()
            log.warning("converting raw history to chunks: %d of %d hosts, %d of %d samples, %.0f s so far",
                        n, len(hosts), moved, total, said - started)
    if moved != total:
        log.warning("converting raw history to chunks: %d raw samples left behind (a time no store writes, "
                    "or a GPU the file no longer lists)", total - moved)
    log.info("converted %d raw samples to chunks in %.1f s", moved, time.monotonic() - started)
