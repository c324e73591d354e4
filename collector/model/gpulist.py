"""GPU indexes as Slurm writes them (``IDX:0-1``, ``0,2-3``): the one notation of a list of GPUs in alert
labels (``allocated_unused``'s ``gpus``), summaries and the status view, written and read back here.

Plain functions, no imports: the CLI reads alert labels with them (collector/model/firing.py)."""

from __future__ import annotations

from collections.abc import Iterable


def fmt_indexes(indexes: Iterable[int]) -> str:
    """``0-1``, ``0,2-3`` (sorted, repeats dropped; empty: "")."""
    out: list[str] = []
    first = last = -2
    for i in sorted(set(indexes)):
        if i == last + 1:
            last = i
            continue
        if last >= 0:
            out.append(_run(first, last))
        first = last = i
    if last >= 0:
        out.append(_run(first, last))
    return ",".join(out)


def _run(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def parse_indexes(text: str) -> list[int]:
    """The indexes :func:`fmt_indexes` wrote (``0,2-3`` -> [0, 2, 3]); a part that is not a number or a
    range of numbers is skipped (a label from a newer collector must not break a reader)."""
    out: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            continue
        first, last = int(lo), int(hi) if dash else int(lo)
        if last - first > 65535:  # wider than any index the wire carries (wire.INDEX_MAX): not GPUs
            continue
        out.update(range(first, last + 1))
    return sorted(out)
