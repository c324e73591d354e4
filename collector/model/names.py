"""Names as people type them: natural order (n2 before n10), shell globs, and "unknown host" errors.

One definition for every place that matches a name against what a person typed: the status filters, the
query API's host checks, rule selectors, silences and ``top``'s filter box.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Any

from gpufleet.collector.errors import QueryError

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> list[Any]:
    """n2 before n10."""
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(name)]


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def matches(value: str, pattern: str) -> bool:
    """The value is the pattern, or a shell glob pattern matches it (case-sensitive)."""
    return value == pattern or (is_glob(pattern) and fnmatch.fnmatchcase(value, pattern))


def matches_any(value: str, patterns: Iterable[str]) -> bool:
    return any(matches(value, p) for p in patterns)


def known_list(names: Iterable[str], limit: int = 8) -> str:
    """``n1, n2, ... (12 in all)``: the names an error offers instead of a typo."""
    ordered = sorted(names, key=natural_key)
    shown = ", ".join(ordered[:limit])
    return shown + (f", ... ({len(ordered)} in all)" if len(ordered) > limit else "") if ordered else "none"


def check_hosts(patterns: Sequence[str], known: Iterable[str]) -> None:
    """Raise :class:`QueryError` for a host name (not a glob) that is not in ``known``."""
    names = set(known)
    for p in patterns:
        if not is_glob(p) and p not in names:
            raise QueryError(f"unknown host {p!r} (known: {known_list(names)})")
