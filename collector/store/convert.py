"""Schema v7's conversion: the raw samples of a file written before chunks (one row per GPU per second in
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
#: How far ahead of the clock a stored time may lie and still be kept (store/sweep.py keeps as much).
AHEAD: Final = 86400.0
_SELECT: Final = ("SELECT gpu_id, ts, util, util_mem, mem_used, temp, power, clock_sm, clock_mem, fan, "
                  "ecc_corrected, ecc_uncorrected, throttle, error FROM samples "
                  "WHERE gpu_id = ? AND ts >= ? AND ts < ? ORDER BY ts")


def samples_to_chunks(conn: sqlite3.Connection) -> None:
    """The v6 -> v7 step: every reachable raw sample into its host's chunks."""
    lo, hi = window(time.time(), AHEAD)
    hosts: dict[int, list[int]] = {}
    for gid, hid in conn.execute("SELECT id, host_id FROM gpus ORDER BY id"):
        hosts.setdefault(int(hid), []).append(int(gid))
    total = int(conn.execute("SELECT count(*) FROM samples").fetchone()[0])
    moved = 0
    started = time.monotonic()
    for n, (hid, gids) in enumerate(sorted(hosts.items()), start=1):
        bounds = [conn.execute("SELECT min(ts), max(ts) FROM samples WHERE gpu_id = ? AND ts >= ? "
                               "AND ts <= ?", (gid, lo, hi)).fetchone() for gid in gids]
        firsts = [b[0] for b in bounds if b[0] is not None]
        if not firsts:
            continue
        start = int(min(firsts) // WINDOW) * WINDOW
        end = max(b[1] for b in bounds if b[1] is not None)
        while start <= end:
            rows: list[Row] = []
            for gid in gids:
                rows += conn.execute(_SELECT, (gid, max(start, lo), min(start + WINDOW, hi + 1e-6)))
            chunks = []
            for span, group in by_span(rows).items():
                merged = chunkcodec.normalize(group)
                chunks.append((hid, span, len(merged), chunkcodec.encode(merged)))
            chunkrows.insert(conn, chunks)
            moved += len(rows)
            start += WINDOW
        if time.monotonic() - started > 10 and n % 50 == 0:
            log.warning("converting raw history to chunks: %d of %d hosts, %d of %d samples", n, len(hosts),
                        moved, total)
    if moved != total:
        log.warning("converting raw history to chunks: %d raw samples left behind (a time no store writes, "
                    "or a GPU the file no longer lists)", total - moved)
    log.info("converted %d raw samples to chunks in %.1f s", moved, time.monotonic() - started)
