"""Plain column tables for the list views (alerts, silences, hosts, processes, by user) that stay readable
at 80 columns.

rich's Table squeezes every column when the console is narrow, so an alert summary ended up folded into a
four-character column, one syllable a line. Here the short columns keep their natural width and the one
long text column (summary, reason, command, comment) either wraps beside them or, when fewer than
``tail_min`` cells are left, moves onto its own indented line(s) under the row.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from gpufleet.cli.lines import Line, cells, cut, to_text

if TYPE_CHECKING:
    from rich.text import Text

#: a cell: plain text, or (text, rich style name)
Cell = Union[str, "tuple[str, str]"]
GAP = 2
INDENT = 4


@dataclass(frozen=True, slots=True)
class Col:
    name: str
    right: bool = False
    max: int | None = None  # cut longer cells with an ellipsis
    shrink: bool = False  # may be cut further when the fixed columns alone exceed the width
    drop: int = 0  # may be left out when the columns do not fit: the highest first (0: never)


def _parts(c: Cell) -> tuple[str, str]:
    return (c, "") if isinstance(c, str) else c


def _fit(text: str, width: int, right: bool) -> str:
    n = cells(text)
    if n > width:
        text = cut(text, max(width - 1, 0)) + "…" if width >= 1 else ""
        n = cells(text)
    pad = " " * (width - n)
    return pad + text if right else text + pad


def _wrap(text: str, width: int) -> list[str]:
    width = max(width, 10)
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def grid_lines(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    tail: str | None = None,
    tail_min: int = 30,
    header_style: str = "bold dim",
) -> list[Line]:
    """Lay out ``rows`` (one cell per column, plus the ``tail`` cell last when ``tail`` names it).

    Narrow first costs the gaps (two cells, then one), then the columns that may be dropped (``drop``, the
    highest first), then the ones that may be cut (``shrink``); a column that is neither is never cut."""
    width = max(width, 40)
    widths = [cells(c.name) for c in cols]
    for row in rows:
        for i in range(len(cols)):
            widths[i] = max(widths[i], cells(_parts(row[i])[0]))
    widths = [min(w, c.max) if c.max else w for w, c in zip(widths, cols, strict=True)]
    keep = list(range(len(cols)))
    gap = GAP

    def fixed_now() -> int:
        return sum(widths[i] for i in keep) + gap * (len(keep) - 1)

    if fixed_now() > width:
        gap = 1
    for i in sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: -cols[i].drop):
        if fixed_now() <= width:
            break
        keep.remove(i)
    if len(keep) < len(cols):
        n = len(cols)
        cols = [cols[i] for i in keep]
        widths = [widths[i] for i in keep]
        rows = [[*(row[i] for i in keep), *row[n:]] for row in rows]
        keep = list(range(len(cols)))
    fixed = fixed_now()
    while fixed > width and any(c.shrink and widths[i] > 6 for i, c in enumerate(cols)):
        i = max((i for i, c in enumerate(cols) if c.shrink and widths[i] > 6), key=lambda i: widths[i])
        cut_by = min(fixed - width, widths[i] - 6)
        widths[i] -= cut_by
        fixed -= cut_by
    room = width - fixed - gap
    longest_tail = max((cells(_parts(r[len(cols)])[0]) for r in rows), default=0) if tail else 0
    inline = tail is not None and (room >= tail_min or (room >= 8 and longest_tail <= room))

    head = Line()
    for i, c in enumerate(cols):
        head.append(_fit(c.name, widths[i], c.right) + (" " * gap if i < len(cols) - 1 else ""))
    if inline and tail:
        head.append(" " * gap + tail)
    out = [Line(head.plain.rstrip(), header_style).truncate(width)]

    for row in rows:
        line = Line()
        for i, c in enumerate(cols):
            text, style = _parts(row[i])
            line.append(_fit(text, widths[i], c.right), style)
            if i < len(cols) - 1:
                line.append(" " * gap)
        text, style = _parts(row[len(cols)]) if tail else ("", "")
        if tail and inline:
            pieces = _wrap(text, room) if text else [""]
            line.append(" " * gap + pieces[0], style)
            out.append(line.rstrip().truncate(width))
            out.extend(Line(" " * (fixed + gap) + p, style) for p in pieces[1:])
        else:
            out.append(line.rstrip().truncate(width))
            if text:
                out.extend(Line(" " * INDENT + p, style) for p in _wrap(text, width - INDENT))
    return out


def grid(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    tail: str | None = None,
    tail_min: int = 30,
) -> Text:
    """:func:`grid_lines` as one rich Text, for ``console.print`` / ``Group``."""
    return to_text(grid_lines(cols, rows, width, tail=tail, tail_min=tail_min))
