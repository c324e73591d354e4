"""Chunks stored in pieces (store/chunkrows.py): only a chunk's first piece is indexed and the rest are
found by rowid, so chunks of several hosts written together, one replaced, some deleted, must still read back
whole and apart, and the index must hold one entry per chunk."""

from __future__ import annotations

import os
import sqlite3

from gpufleet.collector.store import chunkrows, schema


def _blob(host: int, span: int, size: int) -> bytes:
    return bytes([host, span % 251]) + os.urandom(size - 2)


def test_pieces_of_interleaved_chunks_read_back_whole() -> None:
    conn = sqlite3.connect(":memory:")
    schema.migrate(conn)
    sizes = {1: 2 * chunkrows.PIECE + 17, 2: chunkrows.PIECE, 3: 5}
    want = {(h, s): _blob(h, s, size) for s in (60, 120, 180) for h, size in sizes.items()}
    chunkrows.insert(conn, [(h, s, 10 * h, b) for (h, s), b in want.items()])
    want[(2, 120)] = _blob(2, 120, 3 * chunkrows.PIECE + 1)  # a late sample: the minute written again
    chunkrows.replace(conn, 2, 120, 21, want[(2, 120)])

    for (h, s), blob in want.items():
        assert chunkrows.read(conn, h, s) == blob
    for h in sizes:
        assert list(chunkrows.scan(conn, h, 0, 1000)) == [(s, want[(h, s)]) for s in (60, 120, 180)]
    indexed = conn.execute("SELECT count(*) FROM chunks INDEXED BY chunks_first WHERE piece = 0").fetchone()
    assert indexed[0] == 9
    assert conn.execute("SELECT sum(n) FROM chunks").fetchone()[0] == 3 * 60 + 21 - 20

    assert chunkrows.delete_before(conn, 2, 120, 10) == 2  # minutes 60 and 120, every piece of them
    assert chunkrows.read(conn, 2, 60) is None and chunkrows.read(conn, 2, 120) is None
    assert conn.execute("SELECT count(*) FROM chunks WHERE host_id = 2").fetchone()[0] == 1
    assert list(chunkrows.scan(conn, 1, 0, 1000)) == [(s, want[(1, s)]) for s in (60, 120, 180)]
    assert chunkrows.read(conn, 2, 180) == want[(2, 180)] and chunkrows.read(conn, 3, 120) == want[(3, 120)]
