"""Connection setup, running sync code on a connection's thread, and mapping sqlite errors.

Every store connection is an :mod:`aiosqlite` connection: one thread per connection, so SQLite work never
runs on the event loop. The store runs whole functions (a batch write, a multi-statement query) on that
thread with :func:`call` instead of one await per statement.

Durability choice: ``journal_mode=WAL`` with ``synchronous=FULL``. With WAL, NORMAL already keeps every
committed transaction across a process kill -9 (the WAL is in the OS page cache); FULL also fsyncs the WAL
on each commit, so committed samples survive a power loss too. The writer commits a batch at most every
``batch_max_delay`` (0.5 s) or per 5,000 rows, so the extra fsync costs a few milliseconds a second.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import aiosqlite
from gpufleet.collector.errors import StorageError, StorageFull

log = logging.getLogger(__name__)
T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
#: After a checkpoint resets the WAL, truncate the file back to this size so it does not stay large.
JOURNAL_SIZE_LIMIT = 64 << 20

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_PROTOCOL = 15
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
#: Primary result codes that say "the storage is unwell right now", not "this batch is bad": retry later.
#: A corrupt file is the storage's fault too: the frames stay queued (bounded) and ``storage`` fires,
#: rather than each batch being written row by row and dropped.
TRANSIENT_CODES = frozenset({SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL,
                             SQLITE_CANTOPEN, SQLITE_PROTOCOL, SQLITE_CORRUPT, SQLITE_NOTADB})


async def call(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn(sqlite3_connection)`` on the connection's own thread and return its result.

    aiosqlite has no public hook for running a function on its thread; ``_execute`` is the one method all
    its public calls go through (unchanged from 0.17 to 0.22), so this is the only place that relies on it.
    """
    raw = conn._conn
    result = await conn._execute(fn, raw)  # type: ignore[no-untyped-call]
    return cast(T, result)


async def connect(path: Path, *, readonly: bool) -> aiosqlite.Connection:
    """Open a connection in autocommit mode (the store issues BEGIN IMMEDIATE / COMMIT itself)."""
    if readonly:
        target = f"{path.resolve().as_uri()}?mode=ro"
        conn = await aiosqlite.connect(target, uri=True, isolation_level=None, check_same_thread=False)
    else:
        conn = await aiosqlite.connect(str(path), isolation_level=None, check_same_thread=False)
    return conn


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is open (SQLITE_FULL may already have rolled it back)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed")


def in_tx(conn: sqlite3.Connection, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in one ``BEGIN IMMEDIATE`` transaction: committed if it returns, rolled back if not."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn()
        conn.execute("COMMIT")
        return result
    except BaseException:
        rollback(conn)
        raise


def setup_writer(conn: sqlite3.Connection) -> None:
    """PRAGMAs for the one writing connection (see the module docstring for synchronous=FULL)."""
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StorageError(f"could not switch the database to WAL mode (journal_mode is {mode!r})")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
    conn.execute("PRAGMA cache_size=-32768")  # 32 MiB: the hot b-tree pages of a large fleet
    conn.execute("PRAGMA temp_store=MEMORY")


def setup_reader(conn: sqlite3.Connection) -> None:
    """PRAGMAs for a reading connection: WAL readers see the last commit and never wait on the writer."""
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only=ON")
    conn.execute("PRAGMA cache_size=-16384")
    conn.execute("PRAGMA temp_store=MEMORY")


def primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_full(exc: BaseException) -> bool:
    """SQLITE_FULL (a full disk, or max_page_count reached) or a raw ENOSPC."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    if isinstance(exc, sqlite3.Error):
        return primary_code(exc) == SQLITE_FULL or "database or disk is full" in str(exc)
    return False


def is_corrupt(exc: BaseException) -> bool:
    """SQLITE_CORRUPT / SQLITE_NOTADB: the file itself is damaged."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    return primary_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB) or "malformed" in str(exc) \
        or "not a database" in str(exc)


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same writes later can succeed (full disk, I/O error, lock held too long)."""
    if is_full(exc) or isinstance(exc, OSError):
        return True
    if is_corrupt(exc):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = primary_code(exc)
        return code is None or code in TRANSIENT_CODES  # Python 3.10 has no sqlite_errorcode
    return False


def storage_error(exc: BaseException, where: str) -> StorageError:
    """Wrap a library error as the collector's typed error, saying which file it concerns."""
    if isinstance(exc, StorageError):
        # the same class (StorageFull stays StorageFull), and always the file it concerns
        return exc if where in str(exc) else type(exc)(f"{where}: {exc}")
    if is_full(exc):
        return StorageFull(f"{where}: database or disk is full, write rolled back ({exc})")
    return StorageError(f"{where}: {type(exc).__name__}: {exc}")
