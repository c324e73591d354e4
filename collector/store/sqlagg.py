"""SQLite's own sum() and avg(), in Python: aggregates over samples read back from chunks equal, to the last
bit, what the same SQL gave over the old one-row-per-sample table (same values, same order, same rounding).

SQLite before 3.43 adds every value as a double, in order; from 3.43 on it uses Kahan-Babuska-Neumaier
summation and keeps integers exact until a non-integer comes (func.c, sumStep / avgFinalize). Python's own
sum() compensates floats from 3.12 on, so neither it nor math.fsum is the same thing.
tests/store/test_sqlagg.py checks them against the linked SQLite on random data (the branch that SQLite
uses; these machines link 3.40, so the Kahan-Babuska-Neumaier branch is checked where a newer one is linked).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from functools import reduce
from operator import add
from typing import Any, Final

#: The summation the linked SQLite library uses.
KBN: Final = sqlite3.sqlite_version_info >= (3, 43, 0)
_BIG: Final = 4503599627370496  # 2**52


class _Sum:
    __slots__ = ("approx", "cnt", "err", "isum", "rsum")

    def __init__(self) -> None:
        self.cnt = 0
        self.isum = 0
        self.rsum = 0.0
        self.err = 0.0
        self.approx = False

    def _step(self, r: float) -> None:
        s = self.rsum
        t = s + r
        if abs(s) > abs(r):
            self.err += (s - t) + r
        else:
            self.err += (r - t) + s
        self.rsum = t

    def _step_int(self, v: int) -> None:
        if v <= -_BIG or v >= _BIG:
            small = _trunc_mod(v, 16384)
            self._step(float(v - small))
            self._step(float(small))
        else:
            self._step(float(v))

    def _init(self, v: int) -> None:
        if v <= -_BIG or v >= _BIG:
            small = _trunc_mod(v, 16384)
            self.rsum, self.err = float(v - small), float(small)
        else:
            self.rsum, self.err = float(v), 0.0

    def add(self, v: int | float) -> None:
        self.cnt += 1
        if type(v) is int:
            if not self.approx:
                total = self.isum + v
                if -(1 << 63) <= total < (1 << 63):
                    self.isum = total
                    return
                self._init(self.isum)
                self.approx = True
            self._step_int(v)
            return
        if not self.approx:
            self._init(self.isum)
            self.approx = True
        self._step(float(v))

    def value(self) -> float | int:
        if not self.approx:
            return self.isum
        return self.rsum + self.err if abs(self.err) != float("inf") else self.rsum


def _trunc_mod(v: int, m: int) -> int:
    """C's ``%`` (the sign of the dividend), not Python's."""
    r = abs(v) % m
    return -r if v < 0 else r


def _numbers(values: Iterable[object]) -> list[int | float]:
    """The values SQLite's sum() counts: numbers (NULLs and anything else skipped)."""
    return [v for v in values if type(v) is int or type(v) is float]


def sum_(values: Iterable[object]) -> int | float | None:
    """``sum(x)``: NULL over no numbers; an integer while every value is one (and fits 64 bits)."""
    nums = _numbers(values)
    if not nums:
        return None
    if not KBN:
        if all(type(v) is int for v in nums):
            total = sum(nums)
            if -(1 << 63) <= total < (1 << 63):
                return total
        return float(reduce(add, map(float, nums), 0.0))
    acc = _Sum()
    for v in nums:
        acc.add(v)
    return acc.value()


def min_avg_max(values: Sequence[object]) -> tuple[Any, Any, Any]:
    """``min(x), avg(x), max(x)`` as SQLite gives them over ``values`` in this order (the 1-minute rollup).
    Numbers (and NULLs) here; anything else (a text an old file holds in a number column, which SQLite's
    min and max order after numbers and its avg counts as what its text reads as) by SQLite itself."""
    kinds = set(map(type, values))
    if kinds <= _NUMBERS:
        if type(None) in kinds:
            values = [v for v in values if v is not None]
        if not values:
            return None, None, None
        return min(values), _avg(values), max(values)  # type: ignore[type-var,arg-type]
    conn = _scratch()
    conn.execute("DELETE FROM v")
    conn.executemany("INSERT INTO v (x) VALUES (?)", [(x,) for x in values])
    out: tuple[Any, Any, Any] = conn.execute("SELECT min(x), avg(x), max(x) FROM v").fetchone()
    return out


_NUMBERS: Final = frozenset({int, float, type(None)})
_local = threading.local()


def _scratch() -> sqlite3.Connection:
    """A private in-memory database of this thread: one table of one untyped column, in insertion order."""
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE v (x)")
    return conn


def avg(values: Iterable[object]) -> float | None:
    """``avg(x)``: NULL over no numbers."""
    nums = _numbers(values)
    return _avg(nums) if nums else None


def _avg(nums: Sequence[int | float]) -> float:
    if not KBN:
        return float(reduce(add, map(float, nums), 0.0)) / float(len(nums))
    acc = _Sum()
    for v in nums:
        acc.add(v)
    total = acc.value()
    return float(total) / float(acc.cnt)
