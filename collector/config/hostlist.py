"""Host ranges: ``node[01-16]``, ``r[1-2]n[1,3]``; sized arithmetically before anything is expanded."""

from __future__ import annotations

import itertools
import re

BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE_BODY = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
#: Hosts one name pattern may expand to, unless ``max_hosts`` (the cap on the whole list) allows more.
MAX_HOSTS_PER_PATTERN = 10000
#: Default cap on the whole host list (top-level ``max_hosts``).
DEFAULT_MAX_HOSTS = 10000

_Piece = str | list[tuple[int, int, int]]  # literal text, or a bracket's ranges (lo, hi, zero-pad width)


def _pieces(pattern: str) -> list[_Piece]:
    """Split a pattern into literal text and bracket ranges, checking the syntax; expands nothing."""
    pieces: list[_Piece] = []
    pos = 0
    for m in BRACKET.finditer(pattern):
        body = m.group(1).replace(" ", "")
        if not _RANGE_BODY.fullmatch(body):
            raise ValueError(f"bad host range '[{m.group(1)}]': use e.g. node[01-16] or node[1,3,5-7]")
        pieces.append(pattern[pos:m.start()])
        ranges = []
        for item in body.split(","):
            lo_s, _, hi_s = item.partition("-")
            hi_s = hi_s or lo_s
            lo, hi = int(lo_s), int(hi_s)
            if lo > hi:
                raise ValueError(f"bad host range '{item}': start is after end")
            width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
            ranges.append((lo, hi, width))
        pieces.append(ranges)
        pos = m.end()
    if "[" in pattern[pos:] or "]" in pattern[pos:]:
        raise ValueError("unbalanced '[' or ']' in host pattern")
    pieces.append(pattern[pos:])
    return pieces


def hostlist_size(pattern: str) -> int:
    """How many hosts ``pattern`` names, by arithmetic (``r[0-9999]n[0-9999]`` is 10**8 at once, in
    microseconds, allocating nothing). Raises ValueError on bad syntax."""
    total = 1
    for piece in _pieces(pattern):
        if isinstance(piece, list):
            total *= sum(hi - lo + 1 for lo, hi, _w in piece)
    return total


def expand_hostlist(pattern: str, *, limit: int = MAX_HOSTS_PER_PATTERN) -> list[str]:
    """``node[01-03]`` -> node01, node02, node03; ``r[1-2]n[1,3]`` -> the product. Raises ValueError,
    also when the pattern names more than ``limit`` hosts (checked before expanding)."""
    total = hostlist_size(pattern)
    if total > limit:
        raise ValueError(f"host range expands to {total} hosts (more than {limit})")
    expanded = [[p] if isinstance(p, str) else
                [str(i).zfill(w) for lo, hi, w in p for i in range(lo, hi + 1)] for p in _pieces(pattern)]
    return ["".join(parts) for parts in itertools.product(*expanded)]
