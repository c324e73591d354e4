"""A bounded sliding window of samples, for rules that judge a pattern over time (util swings, a mean).

Bounded twice: points older than ``span`` seconds drop out, and at most ``cap`` points are kept (a sample
closer than ``span / cap`` to the previous one is skipped), so a fast agent interval cannot grow it.
:meth:`Window.add` hands back what dropped out, so rules keep running sums and counts: a judgement per
sample costs O(1), not a scan of the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Final, Generic, TypeVar

T = TypeVar("T")
DEFAULT_CAP: Final = 2048
#: A window counts as observed once its samples span this share of it (a sampling interval is lost at
#: each end).
COVERAGE: Final = 0.9


class Window(Generic[T]):
    __slots__ = ("span", "cap", "_points")

    def __init__(self, span: float, cap: int = DEFAULT_CAP) -> None:
        self.span = float(span)
        self.cap = cap
        self._points: deque[tuple[float, T]] = deque(maxlen=cap)

    def add(self, ts: float, value: T) -> list[T] | None:
        """Add a sample; returns the values that dropped out (so a caller keeps sums and counts without
        rescanning), or None when the sample was skipped (not added)."""
        pts = self._points
        if pts and ts - pts[-1][0] < self.span / self.cap:
            return None  # a replay, or faster than the window needs
        dropped = [pts.popleft()[1]] if len(pts) == self.cap else []
        pts.append((ts, value))
        while pts and pts[0][0] < ts - self.span:
            dropped.append(pts.popleft()[1])
        return dropped

    def covered(self) -> float:
        """Seconds between the oldest and newest point."""
        return self._points[-1][0] - self._points[0][0] if len(self._points) > 1 else 0.0

    def full(self) -> bool:
        """The samples span (almost) the whole window: a verdict over it means something."""
        return self.covered() >= COVERAGE * self.span

    def values(self) -> Iterator[T]:
        return (v for _, v in self._points)

    def __len__(self) -> int:
        return len(self._points)
