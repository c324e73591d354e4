"""Chunks in the file: every statement that writes, reads or deletes a row of ``chunks`` is here.

A chunk (one host's samples of one minute, packed by :mod:`chunkcodec`) is stored in *pieces* of at most
``PIECE`` bytes, rows (host_id, span, piece) of one table. Why: a busy 8-GPU host's minute packs to 2-3 KiB,
and SQLite keeps a row that fits a page in one page, so rows of 2-3 KiB leave 4 KiB pages a third to a half
empty (one fits, two do not: 1.6 bytes on disk for each byte of chunk); pieces of 600 bytes fill pages
to within a few percent whatever a host's minute weighs (1.15, tests/bench). A chunk
is always written, replaced and deleted whole, in one transaction, so a reader never sees part of one.
Its pieces are consecutive rows (one ``executemany`` by the one writer: consecutive rowids); only the first
(``piece`` 0) is in the index, unique by (host_id, span), and holds the number of pieces: an index of every
piece weighed 0.17 bytes a GPU-sample, a third of the table's overhead. The others are read by rowid.
Every query that finds chunks by host and minute says ``piece = 0`` (the partial index's condition).
``n``, the chunk's sample count, is on its first piece (0 on the others): ``sum(n)`` counts samples.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Final

#: Bytes of chunk a row holds at most (with 4 KiB pages: six rows of them fill a page).
PIECE: Final = 600

_INSERT: Final = "INSERT INTO chunks (host_id, span, piece, pieces, n, data) VALUES (?, ?, ?, ?, ?, ?)"
#: Each chunk's first piece in a host's minutes [?2, ?3] joined to its pieces by rowid.
_PIECES: Final = ("FROM chunks c JOIN chunks p ON p.id >= c.id AND p.id < c.id + c.pieces "
                  "WHERE c.host_id = ?1 AND c.span >= ?2 AND c.span <= ?3 AND c.piece = 0")
_READ: Final = f"SELECT p.data {_PIECES} ORDER BY c.span, p.id"
_SCAN: Final = f"SELECT c.span, p.data {_PIECES} ORDER BY c.span, p.id"
_DELETE: Final = f"DELETE FROM chunks WHERE id IN (SELECT p.id {_PIECES})"


def pieces(host_id: int, span: int, n: int, blob: bytes) -> Iterator[tuple[int, int, int, int, int, bytes]]:
    """The rows of one chunk, for ``executemany(INSERT)`` (in this order: their rowids follow one another)."""
    count = max(1, -(-len(blob) // PIECE))
    for k in range(count):
        yield host_id, span, k, count if k == 0 else 1, n if k == 0 else 0, blob[k * PIECE:(k + 1) * PIECE]


def insert(conn: sqlite3.Connection, chunks: Iterable[tuple[int, int, int, bytes]]) -> None:
    """New chunks (host_id, span, n, blob): none of them is in the file yet."""
    conn.executemany(_INSERT, (row for c in chunks for row in pieces(*c)))


def replace(conn: sqlite3.Connection, host_id: int, span: int, n: int, blob: bytes) -> None:
    """Write a chunk over the one stored for that host and minute, if any."""
    conn.execute(_DELETE, (host_id, span, span))
    conn.executemany(_INSERT, pieces(host_id, span, n, blob))


def read(conn: sqlite3.Connection, host_id: int, span: int) -> bytes | None:
    """The chunk of that host and minute, or None."""
    parts = [data for (data,) in conn.execute(_READ, (host_id, span, span))]
    return b"".join(parts) if parts else None


def scan(conn: sqlite3.Connection, host_id: int, first: float, last: float) -> Iterator[tuple[int, bytes]]:
    """(span, chunk) of a host's chunks whose minute starts in [first, last], in time order."""
    span: int | None = None
    parts: list[bytes] = []
    for s, data in conn.execute(_SCAN, (host_id, first, last)):
        if s != span:
            if parts:
                assert span is not None
                yield span, b"".join(parts)
            span, parts = int(s), []
        parts.append(data)
    if parts:
        assert span is not None
        yield span, b"".join(parts)


def delete_before(conn: sqlite3.Connection, host_id: int, last: float, limit: int) -> int:
    """Delete at most ``limit`` of a host's chunks whose minute starts by ``last`` (oldest first), each whole;
    how many chunks went."""
    spans = [s for (s,) in conn.execute("SELECT span FROM chunks WHERE host_id = ? AND span <= ? "
                                        "AND piece = 0 ORDER BY span LIMIT ?", (host_id, last, limit))]
    if spans:
        conn.execute(_DELETE, (host_id, spans[0], spans[-1]))
    return len(spans)
