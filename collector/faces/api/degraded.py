"""Answers while the history file is damaged or gone: what answers from memory still answers, and what
could not be read is named in the answer ("recently resolved: history unreadable since 14:02 ..."), never
an internal error. The live view and the alert engine hold the fleet and its active alerts; only history
lives in the file.
"""

from __future__ import annotations

import time

from gpufleet.collector.errors import HistoryUnreadable, StorageError

#: What still answers (said by the CLI's read-only fallback too: there it says where to look).
LIVE: str = "a running collector's status, alerts, hosts, top and web page answer from memory"


def when(t: float) -> str:
    """``14:02`` today, ``2026-03-01 14:02`` on another day (local time, as the operator reads a clock)."""
    local = time.localtime(t)
    same_day = time.localtime()[:3] == local[:3]
    return time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", local)


def unreadable(what: str, exc: StorageError) -> str:
    """One line for an answer's part that could not be read: ``what``, since when, and why."""
    if isinstance(exc, HistoryUnreadable):
        return f"{what}: history unreadable since {when(exc.since)} ({exc})"
    return f"{what}: the database cannot be used ({exc})"


def op_failed(op: str, exc: StorageError) -> str:
    """The error of an op that needs the history (history, report, jobs, ...) or a write (a silence)."""
    if isinstance(exc, HistoryUnreadable):
        return f"{op}: history unreadable since {when(exc.since)} ({exc}); {LIVE}"
    return f"{op}: the database cannot be written ({exc}); {LIVE}"
