"""Times people type on the command line (``--since 24h``, ``--until 2026-11-30T08:00``) and times we print.

Kept apart from click so the parsing is testable on its own and the error text is the same everywhere.
Dates without a zone are local time, as a person at the terminal means them.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_DURATION_FULL = re.compile(r"^(?:\s*\d+(?:\.\d+)?\s*[smhdw])+\s*$")
_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")

EXPECTED = "expected a duration like 24h, 7d, 90m or a date like 2026-11-30 or 2026-11-30T08:00"


class TimeParseError(ValueError):
    """A time argument that is neither a duration nor a date; ``str()`` is the one-line user message."""

    def __init__(self, option: str, text: str) -> None:
        self.option, self.text = option, text
        super().__init__(f"bad {option} {text!r}: {EXPECTED}")


def parse_duration(text: str) -> float | None:
    """``90m`` / ``1h30m`` / ``7d`` -> seconds, or None when ``text`` is not a duration."""
    t = text.strip().lower()
    if not _DURATION_FULL.match(t):
        return None
    return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(t))


def parse_time(text: str, *, option: str = "--since", now: float | None = None) -> float:
    """A point in time: a duration means *that long before now*; ``now``; or a local/ISO date(-time).

    Raises :class:`TimeParseError` with a message naming ``option``.
    """
    now = time.time() if now is None else now
    t = text.strip()
    if t.lower() == "now":
        return now
    seconds = parse_duration(t)
    if seconds is not None:
        return now - seconds
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(t, fmt).timestamp()
        except ValueError:
            continue
    try:  # full ISO 8601 with a zone, e.g. 2026-11-30T08:00:00+00:00
        return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise TimeParseError(option, text) from None


def parse_range(
    since: str | None, until: str | None, *, default_since: str = "24h", now: float | None = None
) -> tuple[float, float]:
    """``--since`` / ``--until`` to (start, end); the start must come before the end."""
    now = time.time() if now is None else now
    start = parse_time(since or default_since, option="--since", now=now)
    end = parse_time(until, option="--until", now=now) if until else now
    if start >= end:
        raise ValueError(f"--since ({fmt_ts(start)}) must be before --until ({fmt_ts(end)})")
    return start, end


def fmt_duration(seconds: float | None) -> str:
    """Compact human duration: ``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def fmt_ago(ts: float | None, now: float | None = None) -> str:
    """``3m ago`` (or ``never``)."""
    if ts is None:
        return "never"
    now = time.time() if now is None else now
    return f"{fmt_duration(now - ts)} ago"


def fmt_ts(ts: float | None) -> str:
    """Local ``2026-11-30 08:00:05`` (or ``-``)."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
