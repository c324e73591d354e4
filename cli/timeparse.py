"""Times people type on the command line (``--since 24h``, ``--until 2026-11-30T08:00``) and times we print.

Kept apart from click so the parsing is testable on its own and the error text is the same everywhere.
Durations are read by :mod:`gpufleet.collector.units` (the same grammar and bounds as the config file);
dates without a zone are local time, as a person at the terminal means them.
"""

from __future__ import annotations

import time
from datetime import datetime

from gpufleet.collector.units import DurationError, fmt_duration
from gpufleet.collector.units import parse_duration as _parse_units

_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")

EXPECTED = "expected a duration like 24h, 7d, 90m or a date like 2026-11-30 or 2026-11-30T08:00"


class TimeParseError(ValueError):
    """A time argument that is neither a duration nor a date; ``str()`` is the one-line user message."""

    def __init__(self, option: str, text: str, reason: str = EXPECTED) -> None:
        self.option, self.text = option, text
        super().__init__(f"bad {option} {_shown(text)}: {reason}")


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "...'"


def parse_duration(text: str) -> float | None:
    """``90m`` / ``1h30m`` / ``7d`` / ``500ms`` -> seconds, or None when ``text`` is not written as one.

    A bare number is not a duration here (``--since 2026`` is not 2026 seconds). Raises
    :class:`~gpufleet.collector.units.DurationError` for a duration out of range (over 100 years).
    """
    try:
        return _parse_units(text.strip().lower(), bare_seconds=False)
    except DurationError as exc:
        if exc.syntax:
            return None
        raise


def parse_time(text: str, *, option: str = "--since", now: float | None = None) -> float:
    """A point in time: a duration means *that long before now*; ``now``; or a local/ISO date(-time).

    Raises :class:`TimeParseError` with a message naming ``option``.
    """
    now = time.time() if now is None else now
    t = text.strip()
    if t.lower() == "now":
        return now
    try:
        seconds = parse_duration(t)
    except DurationError as exc:
        raise TimeParseError(option, text, exc.reason) from None
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


def fmt_ago(ts: float | None, now: float | None = None) -> str:
    """``3m ago`` (or ``never``)."""
    if ts is None:
        return "never"
    now = time.time() if now is None else now
    return f"{fmt_duration(now - ts)} ago"


def fmt_ts(ts: float | None) -> str:
    """Local ``2026-11-30 08:00:05`` (or ``-``; ``?`` for a time no calendar can show)."""
    if ts is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return "?"


def fmt_until(ts: float, now: float | None = None) -> str:
    """``until 15:42 (in 52m)``: the clock time alone when it is within a day, with the date beyond."""
    now = time.time() if now is None else now
    shown = fmt_ts(ts)
    shown = shown[11:16] if 0 <= ts - now < 86400 else shown[:16]
    return f"until {shown} (in {fmt_duration(max(0.0, ts - now))})"
