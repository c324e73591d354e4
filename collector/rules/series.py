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

    def oldest(self) -> float | None:
        """When the oldest point was added (None: empty)."""
        return self._points[0][0] if self._points else None

    def full(self) -> bool:
        """The samples span (almost) the whole window: a verdict over it means something."""
        return self.covered() >= COVERAGE * self.span

    def values(self) -> Iterator[T]:
        return (v for _, v in self._points)

    def copy(self) -> Window[T]:
        twin: Window[T] = Window(self.span, self.cap)
        twin._points.extend(self._points)
        return twin

    def __len__(self) -> int:
        return len(self._points)


class WindowMean:
    """The mean of the values of the last ``span`` seconds, at O(1) per value however fast they come.

    Values are summed into buckets of ``span / buckets`` seconds, and the :class:`Window` holds the closed
    buckets' (sum, count): every value counts (no sample is skipped, so a sawtooth cannot alias into the
    mean), and a value costs a few additions until its bucket closes. The mean includes the open bucket.
    """

    __slots__ = ("window", "step", "total", "count", "_open_ts", "_open_sum", "_open_n")

    def __init__(self, span: float, buckets: int = 256) -> None:
        self.window: Window[tuple[float, int]] = Window(span, cap=buckets)
        self.step = self.window.span / buckets
        self.total = 0.0  # sum of every value in the window and the open bucket
        self.count = 0
        self._open_ts = float("-inf")
        self._open_sum = 0.0
        self._open_n = 0

    def add(self, ts: float, value: float) -> None:
        if ts - self._open_ts >= self.step:
            if self._open_n:
                bucket = (self._open_sum, self._open_n)
                dropped = self.window.add(self._open_ts, bucket)
                for old_sum, old_n in [bucket] if dropped is None else dropped:  # None: not kept
                    self.total -= old_sum
                    self.count -= old_n
            self._open_ts, self._open_sum, self._open_n = ts, 0.0, 0
        self._open_sum += value
        self._open_n += 1
        self.total += value
        self.count += 1

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def copy(self) -> WindowMean:
        """Another mean with the same values so far, going on separately."""
        twin = WindowMean.__new__(WindowMean)
        twin.window, twin.step, twin.total, twin.count = self.window.copy(), self.step, self.total, self.count
        twin._open_ts, twin._open_sum, twin._open_n = self._open_ts, self._open_sum, self._open_n
        return twin

    def full(self) -> bool:
        """The values span (almost) the whole window (see :meth:`Window.full`), the open bucket included."""
        oldest = self.window.oldest()
        return oldest is not None and self._open_ts - oldest >= COVERAGE * self.window.span
