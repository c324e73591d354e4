"""One exception hierarchy for the collector, so callers catch by meaning, not by library.

Library errors (asyncssh, sqlite3, aiohttp-ish, OSError) are wrapped at the module boundary that sees them,
with the host / file / notifier they concern in the message.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base of every collector error."""


class ConfigError(CollectorError):
    """A config mistake. ``str()`` reads ``file:line: key: what is wrong``."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.path, self.line, self.key, self.reason = path, line, key, message
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{key + ': ' if key else ''}{message}")


class TransportError(CollectorError):
    """Reaching a host or running its agent failed."""

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        super().__init__(f"{host}: {message}")


class HostUnreachable(TransportError):
    """The host did not answer: no TCP connection, or no SSH banner within ``connect_timeout`` (powered off,
    cut off, or its sshd frozen). Nothing was spent on it but a socket, so it is tried again soon
    (transport/manager.py), not after the handshake backoff."""


class HostKeyError(TransportError):
    """The host's key is unknown (and policy is strict) or differs from known_hosts."""


class AgentError(TransportError):
    """The agent could not be started, exited, or broke the protocol."""


class StorageError(CollectorError):
    """The SQLite store failed."""


class StorageFull(StorageError):
    """SQLITE_FULL / ENOSPC: the write was rolled back; reads keep working."""


class HistoryUnreadable(StorageError):
    """A read of the history failed (a damaged file, an I/O error); ``since``: when reads began failing.
    What answers from memory still answers (collector/api/degraded.py says what could not be read)."""

    def __init__(self, message: str, *, since: float) -> None:
        super().__init__(message)
        self.since = since


class NotifyError(CollectorError):
    """A notifier could not deliver."""


class QueryError(CollectorError):
    """A query API request was invalid or could not be answered."""
