"""The history file's guard: one writing collector per file, and noticing when the file is pulled away.

Two collectors writing one SQLite file would both "work" (SQLite serialises them) while each believes its
alert state and rollup progress are the only ones: a lock file next to the database (``flock``, released
by the kernel when the process dies, so a kill -9 never leaves a stale lock) refuses the second one with
the pid of the first. A database file deleted or replaced under a running collector keeps being written
through the old inode, and that history vanishes at the next restart: :meth:`FileGuard.problem` compares
the path's inode with the one opened, for the maintenance loop to raise the ``storage`` alert.
SQLite's -wal and -shm files left behind by another user (a collector once run as root, a restored backup)
make the first write fail with "attempt to write a readonly database", which names neither file:
:func:`check_sidecars` names the one in the way, its owner and mode, and the fix.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import stat
from pathlib import Path

from gpufleet.collector.errors import StorageError


class FileGuard:
    """Holds ``<db>.lock`` for the life of the writing store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None

    def acquire(self) -> None:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StorageError(
                f"{self.path}: another gpufleet collector (pid {holder}) is writing this database; one "
                "collector per file: stop it, or give this one its own storage.path") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def remember_file(self) -> None:
        st = os.stat(self.path)
        self._ino = (st.st_dev, st.st_ino)

    def problem(self) -> str | None:
        """Why the file at ``path`` is no longer the database being written, or None."""
        if self._ino is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return ("the database file was deleted while the collector runs: new history goes to a file "
                    "nobody can open and is lost at the next restart; restart the collector")
        except OSError as exc:
            return f"cannot stat the database file: {exc.strerror or exc}"
        if (st.st_dev, st.st_ino) != self._ino:
            return ("the database file was replaced while the collector runs (it writes the old one); "
                    "restart the collector")
        return None

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


SIDECARS = ("-wal", "-shm")


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_sidecars(path: Path) -> None:
    """Refuse, naming the file, when SQLite's -wal or -shm file next to ``path`` is not ours to write."""
    for suffix in SIDECARS:
        side = path.with_name(path.name + suffix)
        try:
            st = os.stat(side)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(f"{side}: not a regular file; SQLite needs to write it: remove it while no "
                               "collector runs")
        if not os.access(side, os.R_OK | os.W_OK):
            raise StorageError(
                f"{side}: not writable by {_owner(os.geteuid())} (owner {_owner(st.st_uid)}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}); SQLite cannot write the database without it: "
                f"chown it to the collector's user, or remove it while no collector runs")
