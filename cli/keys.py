"""Single keys from the terminal, for the live screens (``gpufleet top``, ``status --watch``).

The terminal goes into cbreak mode (no echo, no line buffering; Ctrl-C still raises SIGINT) for as long as
the reader is open, and back to how it was on close, whatever happened. Escape sequences are decoded to
names (``up``, ``down``, ``pgup``, ``pgdn``, ``home``, ``end``); a lone Esc is ``esc`` once no more bytes
follow within :data:`ESC_WAIT`. A terminal resize (SIGWINCH) is the key ``resize``, so a screen redraws
at once. Not a terminal: :meth:`KeyReader.wait` only sleeps.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from types import TracebackType
from typing import Any

ESC_WAIT = 0.05  # seconds: how long a lone Esc waits for the rest of an escape sequence

_SEQUENCES = {
    "[A": "up", "[B": "down", "[C": "right", "[D": "left", "OA": "up", "OB": "down", "OC": "right",
    "OD": "left", "[5~": "pgup", "[6~": "pgdn", "[H": "home", "[F": "end", "[1~": "home", "[4~": "end",
    "[7~": "home", "[8~": "end", "OH": "home", "OF": "end", "[3~": "delete", "OP": "f1", "[11~": "f1",
    "[21~": "f10",
}
_SINGLE = {"\r": "enter", "\n": "enter", "\x7f": "backspace", "\x08": "backspace", "\t": "tab"}


def decode(data: str) -> list[str]:
    """The keys in ``data`` (what one read returned): printable characters as themselves, the rest named."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        ch = data[i]
        if ch == "\x1b":
            rest = data[i + 1 :]
            for seq, name in _SEQUENCES.items():
                if rest.startswith(seq):
                    keys.append(name)
                    i += 1 + len(seq)
                    break
            else:
                if rest[:1] in ("[", "O"):  # an unknown sequence: skip it to its final byte
                    j = i + 2
                    while j < len(data) and not (data[j].isalpha() or data[j] == "~"):
                        j += 1
                    i = j + 1
                else:
                    keys.append("esc")
                    i += 1
            continue
        keys.append(_SINGLE.get(ch, ch))
        i += 1
    return keys


class KeyReader:
    """``with KeyReader() as keys: key = keys.wait(2.0)``: a key (or None when ``timeout`` passed)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = sys.stdin if stream is None else stream
        self.fd: int | None = None
        self._saved: Any = None
        self._pending: list[str] = []
        self._wake: tuple[int, int] | None = None  # a pipe the SIGWINCH handler writes a byte to
        self._old_winch: Any = None

    def __enter__(self) -> KeyReader:
        try:
            fd = self.stream.fileno()
            interactive = os.isatty(fd)
        except (AttributeError, ValueError, OSError):
            interactive = False
        if interactive:
            import termios
            import tty

            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            self.fd = fd
            with contextlib.suppress(ValueError, OSError):  # not the main thread: no resize key
                r, w = os.pipe()
                os.set_blocking(w, False)
                self._wake = (r, w)
                self._old_winch = signal.signal(signal.SIGWINCH, self._on_winch)
        return self

    def _on_winch(self, _sig: int, _frame: Any) -> None:
        if self._wake is not None:
            with contextlib.suppress(OSError):  # a full pipe already says "resized"
                os.write(self._wake[1], b"w")

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.fd is not None and self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        if self._wake is not None:
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signal.SIGWINCH, self._old_winch or signal.SIG_DFL)
            for end in self._wake:
                os.close(end)
            self._wake = None
        self.fd = None

    @property
    def interactive(self) -> bool:
        return self.fd is not None

    def wait(self, timeout: float) -> str | None:
        """The next key, waiting at most ``timeout`` seconds."""
        if self._pending:
            return self._pending.pop(0)
        if self.fd is None:
            time.sleep(max(timeout, 0.0))
            return None
        watch = [self.fd] if self._wake is None else [self.fd, self._wake[0]]
        ready, _, _ = select.select(watch, [], [], max(timeout, 0.0))
        if not ready:
            return None
        if self._wake is not None and self._wake[0] in ready:
            os.read(self._wake[0], 1024)
            return "resize"
        data = os.read(self.fd, 1024)
        if not data:  # the terminal went away
            return "eof"
        if data.endswith(b"\x1b") or data == b"\x1b":  # maybe the start of a sequence: give it a moment
            more, _, _ = select.select([self.fd], [], [], ESC_WAIT)
            if more:
                data += os.read(self.fd, 1024)
        self._pending = decode(data.decode("utf-8", "replace"))
        return self._pending.pop(0) if self._pending else None
