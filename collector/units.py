"""Durations, byte sizes and percentages: the one place that parses and prints them.

The config loader, the CLI, the rules' alert text and the reports all read this module, so ``90m`` means
the same everywhere and a duration prints the same in a chat line as in ``gpufleet alerts``. Durations are
bounded (:data:`MAX_DURATION`): a typo like ``999999999999w`` is refused here, with one clear message,
instead of overflowing a timestamp later in whatever code happened to use it.
"""

from __future__ import annotations

import datetime as dt
import math
import re

__all__ = [
    "DURATION_HELP",
    "GIB",
    "MAX_DURATION",
    "MIB",
    "DurationError",
    "fmt_bytes",
    "fmt_duration",
    "fmt_pct",
    "fmt_size",
    "fmt_size_short",
    "parse_duration",
]

MIB = 1 << 20
GIB = 1 << 30

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_DURATION_FULL = re.compile(r"(?:(?:\d+(?:\.\d+)?|\.\d+)\s*(?:ms|s|m|h|d|w)\s*)+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d|w)")

#: The longest duration anyone means (100 years); longer ones are typos and would overflow timestamps.
MAX_DURATION = 100 * 365 * 86400.0
MAX_DURATION_TEXT = "100 years"
DURATION_HELP = "use seconds or a duration like 90s, 30m, 2h, 1d, 1h30m"


class DurationError(ValueError):
    """Not a duration, or one out of range; ``str()`` is the one-line reason (no file or option named)."""

    def __init__(self, reason: str, *, syntax: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        #: True when the text is not written as a duration at all (callers may try other readings).
        self.syntax = syntax


def parse_duration(value: object, *, bare_seconds: bool = True) -> float:
    """Seconds from a number or ``500ms``/``90s``/``30m``/``2h``/``1d``/``1w``/``1h30m``.

    Never negative, never more than :data:`MAX_DURATION`. ``bare_seconds=False`` refuses plain numbers
    (on the command line ``--since 2026`` is more likely a year than 2026 seconds). Units are lower case:
    ``5M`` could mean minutes or months. Raises :class:`DurationError`.
    """
    if isinstance(value, bool) or value is None:
        raise DurationError(f"expected a duration, got {_py_kind(value)}; {DURATION_HELP}", syntax=True)
    if isinstance(value, float) and not math.isfinite(value):
        raise DurationError(f"duration {value!r} must be finite")
    if isinstance(value, (int, float)) and bare_seconds:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range: far too long, said so below
            seconds = math.inf
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise DurationError(f"duration {value!r} must not be negative")
        if bare_seconds and _NUMBER.fullmatch(text):
            seconds = float(text)
        elif _DURATION_FULL.fullmatch(text):
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))
        else:
            raise DurationError(f"bad duration {value!r}; {DURATION_HELP}", syntax=True)
    else:
        raise DurationError(f"expected a duration, got {_py_kind(value)}; {DURATION_HELP}", syntax=True)
    if seconds < 0:
        raise DurationError(f"duration {value!r} must not be negative")
    if seconds > MAX_DURATION:
        raise DurationError(f"duration {_short(value)} is too long (at most {MAX_DURATION_TEXT})")
    return seconds


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "...'"


def _py_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def fmt_duration(seconds: float | None) -> str:
    """Compact and fixed-width-ish: ``45s``, ``12m``, ``3h05m``, ``2d04h`` (``-`` for unknown)."""
    if seconds is None:
        return "-"
    s = int(max(0.0, min(seconds, MAX_DURATION * 10))) if math.isfinite(seconds) else 0
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def fmt_bytes(n: float | None) -> str:
    """Exact enough for an alert: ``512 B``, ``12 KiB``, ``100.0 MiB``, ``40.0 GiB`` (``?`` for unknown)."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_size(n: float | None) -> str:
    """For views with room: ``512 MiB``, ``1.5 GiB``, ``40 GiB`` (``-`` for unknown)."""
    return _size(n, " MiB", " GiB")


def fmt_size_short(n: float | None) -> str:
    """For narrow table cells: ``512M``, ``1.5G``, ``31G`` (``-`` for unknown)."""
    return _size(n, "M", "G")


def _size(n: float | None, mib: str, gib: str) -> str:
    if n is None:
        return "-"
    if n < GIB:
        return f"{n / MIB:.0f}{mib}"
    g = n / GIB
    return f"{g:.1f}{gib}" if g < 10 else f"{g:.0f}{gib}"


def fmt_pct(value: float | None, *, compact: bool = False, unknown: str = "-") -> str:
    """A percentage, rounded: ``42 %`` in sentences, ``42%`` (``compact``) in table cells."""
    if value is None:
        return unknown
    return f"{value:.0f}%" if compact else f"{value:.0f} %"


def fmt_utc(ts: float) -> str:
    """``2026-12-01 08:00 UTC``: a time in a report or a note, the same for every reader."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
