"""Styled lines without rich on the hot path: (text, style) spans, printed as ANSI or made into rich Text.

``gpufleet status`` for 1,000 hosts is 8,000+ lines; rich's segment pipeline costs ~100 us a line, which is
most of a 300 ms budget. A one-shot status writes these lines straight to stdout (SGR codes from the same
style names rich uses), and only the watch view (a screen's worth of lines) goes through rich.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

_SGR = {"bold": "1", "dim": "2", "italic": "3", "underline": "4", "reverse": "7"}
_COLORS = {"black": 0, "red": 1, "green": 2, "yellow": 3, "blue": 4, "magenta": 5, "cyan": 6, "white": 7}
RESET = "\x1b[0m"
_ANSI: dict[tuple[str, str], str] = {}  # span -> its SGR-wrapped text: a fleet's lines repeat most spans
_ANSI_MAX = 65536


@lru_cache(maxsize=8192)
def cells(text: str) -> int:
    """Terminal cells ``text`` takes (wide CJK counts 2)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


@lru_cache(maxsize=256)
def sgr(style: str) -> str:
    """``"bold black on yellow"`` -> ``"\\x1b[1;30;43m"`` (the subset of rich style syntax we use)."""
    codes: list[str] = []
    words = style.split()
    background = False
    for w in words:
        if w == "on":
            background = True
        elif w in _SGR:
            codes.append(_SGR[w])
        elif w in _COLORS:
            codes.append(str((40 if background else 30) + _COLORS[w]))
            background = False
    return f"\x1b[{';'.join(codes)}m" if codes else ""


def tagged(prefix: str, name: str, tag: str, width: int, *, keep: bool) -> str:
    """``prefix name [tag]`` for a ``width``-cell column: the tag where it fits beside the name; with
    ``keep`` the name gives way to it (down to 12 cells), and past that the tag is cut at the column's end."""
    room = width - cells(prefix) - cells(tag) - 3
    if cells(name) <= room or (keep and room < 12):
        return f"{prefix}{name} [{tag}]"
    return f"{prefix}{cut(name, room)} [{tag}]" if keep else prefix + name


def cut(text: str, width: int) -> str:
    """The longest prefix of ``text`` that fits in ``width`` cells."""
    if text.isascii():
        return text[:width]
    out, used = [], 0
    for ch in text:
        w = cells(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


class Line:
    """A line of styled spans; the few Text methods the renderers need."""

    __slots__ = ("spans",)

    def __init__(self, text: str = "", style: str = "") -> None:
        self.spans: list[tuple[str, str]] = [(text, style)] if text else []

    def append(self, text: str, style: str = "") -> Line:
        if text:
            self.spans.append((text, style))
        return self

    def extend(self, other: Line) -> Line:
        self.spans.extend(other.spans)
        return self

    @property
    def plain(self) -> str:
        return "".join([t for t, _ in self.spans])

    def cell_len(self) -> int:
        return sum(cells(t) for t, _ in self.spans)

    def truncate(self, width: int) -> Line:
        """Cut to ``width`` cells (a cut span ends with an ellipsis)."""
        used = 0
        for i, (t, s) in enumerate(self.spans):
            w = cells(t)
            if used + w > width:
                room = width - used
                kept = cut(t, room - 1) + "…" if room >= 1 else ""
                self.spans[i:] = [(kept, s)] if kept else []
                return self
            used += w
        return self

    def rstrip(self) -> Line:
        while self.spans:
            t, s = self.spans[-1]
            stripped = t.rstrip()
            if stripped:
                self.spans[-1] = (stripped, s)
                break
            self.spans.pop()
        return self

    def ansi(self, color: bool) -> str:
        if not color:
            return "".join([t for t, _ in self.spans])
        memo = _ANSI
        out = []
        for span in self.spans:
            a = memo.get(span)
            if a is None:
                if len(memo) > _ANSI_MAX:
                    memo.clear()
                t, s = span
                code = sgr(s) if s else ""
                a = memo[span] = f"{code}{t}{RESET}" if code else t
            out.append(a)
        return "".join(out)

    def text(self) -> Text:
        from rich.text import Text

        t = Text(no_wrap=True, overflow="crop")
        for part, style in self.spans:
            t.append(part, style or None)
        return t


def to_text(lines: list[Line]) -> Text:
    """Many lines as one rich Text (for Live and for tests that print through a Console)."""
    from rich.text import Text

    return Text("\n", no_wrap=True, overflow="crop").join(line.text() for line in lines)


def use_color(stream: IO[str]) -> bool:
    """Colour like rich decides it: FORCE_COLOR wins, NO_COLOR / TERM=dumb / not a terminal turn it off."""
    if os.environ.get("FORCE_COLOR"):
        return True
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


#: the width rich lays out a pipe's output for: wide enough that no line is cut or wrapped
UNBOUNDED = 1 << 14


def output_width(stream: IO[str], explicit: int | None = None) -> int | None:
    """The width to lay ``stream``'s lines out for: ``explicit`` (``--width``), else the terminal's ($COLUMNS
    where set); None when ``stream`` is not a terminal (a pipe or a file gets every line whole, so
    ``gpufleet alerts | grep n07`` finds what the screen shows: as systemd's tools, which ellipsize only on a
    terminal)."""
    if explicit:
        return explicit
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((80, 24)).columns if tty else None


def write_lines(lines: list[Line], stream: IO[str], *, color: bool) -> None:
    if not lines:
        return
    if color:
        text = "\n".join([line.ansi(True) for line in lines])
    else:
        text = "\n".join(["".join([t for t, _ in line.spans]) for line in lines])
    stream.write(text + "\n")
