"""A bounded sliding window of samples, for rules that judge a pattern over time (util swings, a mean).

Bounded twice: points older than ``span`` seconds drop out, and at most ``cap`` points are kept (a sample
closer than ``span / cap`` to the previous one is skipped), so a fast agent interval cannot grow it.
:meth:`Window.add` hands back what dropped out, so rules keep running sums and counts: a judgement per
sample costs O(1), not a scan of the window.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")
DEFAULT_CAP: Final = 2048
#: A window counts as observed once its samples, each standing for one sampling interval, span this share
#: of it.
COVERAGE: Final = 0.9


def observed(span: float, covered: float, points: int) -> bool:
    """Do ``points`` samples ``covered`` seconds apart, oldest to newest, observe (almost) all of ``span``?

    Each sample stands for the interval to the next (their mean spacing), so the newest one's is counted
    too. Sliding past the window's edge, samples every ``interval`` seconds keep floor(span / interval)
    points or one more, and their spread swings between ``span - interval`` and ``span``: judged on the
    spread alone, a window 10 intervals long flapped between full and not at every jitter of the stamps
    (1.8 s of samples against 90 % of 2 s), and one under 10 intervals long (13 s samples, 60 s) was
    never full, so a rule waiting on it never fired. Counted this way it stays full once it has filled.
    """
    return points > 1 and covered * points / (points - 1) >= COVERAGE * span


class Window(Generic[T]):
    """The points of the last ``span`` seconds. Kept compact (issue 33: a window per GPU per rule, thousands
    of hosts): their times in one array of doubles, their values in a list or, with ``typecode``, in an array
    of that type, not a tuple and a float object per point."""

    __slots__ = ("span", "cap", "_ts", "_values", "_head")

    def __init__(self, span: float, cap: int = DEFAULT_CAP, typecode: str | None = None) -> None:
        self.span = float(span)
        self.cap = cap
        self._ts = array("d")
        self._values: Any = array(typecode) if typecode else []
        self._head = 0  # the first live point; the dead ones before it are cut off in bulk

    def add(self, ts: float, value: T) -> list[T] | None:
        """Add a sample; returns the values that dropped out (so a caller keeps sums and counts without
        rescanning), or None when the sample was skipped (not added)."""
        times, values, head = self._ts, self._values, self._head
        if len(times) > head and ts - times[-1] < self.span / self.cap:
            return None  # a replay, or faster than the window needs
        dropped = []
        if len(times) - head == self.cap:
            dropped.append(values[head])
            head += 1
        times.append(ts)
        values.append(value)
        cutoff = ts - self.span
        while head < len(times) and times[head] < cutoff:
            dropped.append(values[head])
            head += 1
        if head > 32 and 4 * head > len(times):
            del times[:head]
            del values[:head]
            head = 0
        self._head = head
        return dropped

    def covered(self) -> float:
        """Seconds between the oldest and newest point."""
        times = self._ts
        return times[-1] - times[self._head] if len(times) - self._head > 1 else 0.0

    def oldest(self) -> float | None:
        """When the oldest point was added (None: empty)."""
        return self._ts[self._head] if len(self._ts) > self._head else None

    def full(self) -> bool:
        """The samples observe (almost) the whole window (:func:`observed`): a verdict over it means
        something."""
        return observed(self.span, self.covered(), len(self))

    def values(self) -> Iterator[T]:
        return iter(self._values[self._head:])

    def copy(self) -> Window[T]:
        twin: Window[T] = Window(self.span, self.cap)
        twin._ts = self._ts[self._head:]
        twin._values = self._values[self._head:]
        return twin

    def __len__(self) -> int:
        return len(self._ts) - self._head


class WindowMean:
    """The mean of the values of the last ``span`` seconds, at O(1) per value however fast they come.

    Values are summed into buckets of ``span / buckets`` seconds, and the :class:`Window` holds the closed
    buckets' (sum, count): every value counts (no sample is skipped, so a sawtooth cannot alias into the
    mean), and a value costs a few additions until its bucket closes. The mean includes the open bucket. A
    bucket is two doubles (its sum in the window's array, its count in ``_counts``, in step with the window's
    points), not a tuple of two objects.
    """

    __slots__ = ("window", "step", "total", "count", "_open_ts", "_open_sum", "_open_n", "_counts", "_first")

    def __init__(self, span: float, buckets: int = 256) -> None:
        self.window: Window[float] = Window(span, cap=buckets, typecode="d")
        self._counts = array("d")  # each kept bucket's count, the window's points' order
        self._first = 0  # the first live one
        self.step = self.window.span / buckets
        self.total = 0.0  # sum of every value in the window and the open bucket
        self.count = 0
        self._open_ts = float("-inf")
        self._open_sum = 0.0
        self._open_n = 0

    def add(self, ts: float, value: float) -> None:
        if ts - self._open_ts >= self.step:
            if self._open_n:
                dropped = self.window.add(self._open_ts, self._open_sum)
                if dropped is None:  # not kept
                    self.total -= self._open_sum
                    self.count -= self._open_n
                else:
                    counts = self._counts
                    counts.append(self._open_n)
                    for old_sum in dropped:
                        self.total -= old_sum
                        self.count -= int(counts[self._first])
                        self._first += 1
                    if self._first > 32 and 4 * self._first > len(counts):
                        del counts[:self._first]
                        self._first = 0
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
        twin._counts, twin._first = self._counts[self._first:], 0
        return twin

    def full(self) -> bool:
        """The buckets observe (almost) the whole window (:func:`observed`), the open one included."""
        oldest = self.window.oldest()
        return oldest is not None and observed(self.window.span, self._open_ts - oldest, len(self.window) + 1)
