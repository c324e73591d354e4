"""Times people type on the command line (``--since 24h``, ``--until 2026-11-30T08:00``) and times we print.

Kept apart from click so the parsing is testable on its own and the error text is the same everywhere.
Durations are read by :mod:`gpufleet.collector.units` (the same grammar and bounds as the config file);
dates without a zone are local time, as a person at the terminal means them.

They read like ``journalctl --since/--until`` (issue 36): ``now``, ``today``, ``yesterday``, ``tomorrow``
(midnight), ``-2h`` or ``2h ago`` (before now; a bare ``24h`` too), ``+1h`` or ``1h left`` (after now), a
time of day (``08:00``: today), a date or a date and time; ``--until`` alone ends the default span there
(``--until 2026-12-01``: the 24 h before it), where it used to count the span back from now.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

from gpufleet.collector.units import DurationError, fmt_duration
from gpufleet.collector.units import parse_duration as _parse_units

_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")

EXPECTED = ("expected a duration like 24h, 7d, -90m, +1h, '2h ago', a word (now, today, yesterday, "
            "tomorrow), a time like 08:00 or a date like 2026-11-30 or 2026-11-30T08:00")
_TIMES_OF_DAY = ("%H:%M", "%H:%M:%S")
_DAYS = {"today": 0, "yesterday": -1, "tomorrow": 1}


class TimeParseError(ValueError):
    """A time argument that is neither a duration nor a date; ``str()`` is the one-line user message."""

    def __init__(self, option: str, text: str, reason: str = EXPECTED) -> None:
        self.option, self.text = option, text
        super().__init__(f"bad {option} {_shown(text)}: {reason}")


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "...'"


_LONG_UNITS = re.compile(r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?)\b")
_SHORT = {"sec": "s", "min": "m", "hou": "h", "hrs": "h", "hr": "h", "day": "d", "wee": "w"}


def _short_units(text: str) -> str:
    """journalctl's spellings (``10 min``, ``2 hours 30 minutes``) as the units grammar writes them."""
    def one(m: re.Match[str]) -> str:
        unit = m.group(2)
        return m.group(1) + _SHORT.get(unit[:3], _SHORT.get(unit[:2], unit))
    return re.sub(r"(?<=[a-z])\s+(?=\d)", "", _LONG_UNITS.sub(one, text))


def parse_duration(text: str) -> float | None:
    """``90m`` / ``1h30m`` / ``7d`` / ``500ms`` / ``10 min`` -> seconds, or None when ``text`` is not written
    as one.

    A bare number is not a duration here (``--since 2026`` is not 2026 seconds). Raises
    :class:`~gpufleet.collector.units.DurationError` for a duration out of range (over 100 years).
    """
    try:
        return _parse_units(_short_units(text.strip().lower()), bare_seconds=False)
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
    word = t.lower()
    if word == "now":
        return now
    if word in _DAYS:
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        return (midnight + timedelta(days=_DAYS[word])).timestamp()
    sign = -1.0
    if word.startswith(("+", "-")):
        sign, t = (1.0 if word[0] == "+" else -1.0), t[1:]
    elif word.endswith(" ago"):
        t = t[: -len(" ago")]
    elif word.endswith(" left"):
        sign, t = 1.0, t[: -len(" left")]
    try:
        seconds = parse_duration(t)
    except DurationError as exc:
        raise TimeParseError(option, text, exc.reason) from None
    if seconds is not None:
        return now + sign * seconds
    if t is not text.strip():  # a sign or "ago" / "left" on something that is not a duration
        raise TimeParseError(option, text)
    for fmt in _TIMES_OF_DAY:
        try:
            clock = datetime.strptime(t, fmt)
        except ValueError:
            continue
        today = datetime.fromtimestamp(now)
        at = today.replace(hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0)
        return at.timestamp()
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
    """``--since`` / ``--until`` to (start, end); the start must come before the end. ``--until`` alone
    ends the default span there (journalctl's ``--until`` with no ``--since``)."""
    now = time.time() if now is None else now
    end = parse_time(until, option="--until", now=now) if until else now
    if since:
        start = parse_time(since, option="--since", now=now)
    else:
        start = parse_time(default_since, option="--since", now=end)
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
