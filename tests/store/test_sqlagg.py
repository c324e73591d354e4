"""store/sqlagg.py gives what the linked SQLite's min(), avg(), max() and sum() give over the same values in
the same order, to the last bit (rollups from chunks must equal the old SQL over one row per sample)."""

from __future__ import annotations

import math
import random
import sqlite3
from typing import Any

import pytest
from gpufleet.collector.store import sqlagg


def _sql(values: list[Any]) -> tuple[Any, ...]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE t (x)")
        conn.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
        row: tuple[Any, ...] = conn.execute("SELECT min(x), avg(x), max(x), sum(x) FROM t").fetchone()
        return row
    finally:
        conn.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def _cases() -> list[list[Any]]:
    rnd = random.Random(43)
    cases: list[list[Any]] = [[], [None], [None, None], [5], [1, 1.0], [1.0, 1], [0.1] * 60, [3, None, 4]]
    for _ in range(300):
        n = rnd.randint(1, 120)
        kind = rnd.choice(("util", "power", "memory", "mixed", "tiny", "huge"))
        values: list[Any] = []
        for _ in range(n):
            if kind == "util":
                values.append(rnd.randint(0, 100))
            elif kind == "power":
                values.append(rnd.randint(60_000, 700_000) / 1000)
            elif kind == "memory":
                values.append(rnd.randint(0, 80 << 30))
            elif kind == "tiny":
                values.append(rnd.uniform(-1e-300, 1e-300))
            elif kind == "huge":
                values.append(rnd.uniform(1e15, 1e17) * rnd.choice((1, -1)))
            else:
                values.append(rnd.choice((rnd.randint(-10**12, 10**12), rnd.random() * 1e6, None)))
        if rnd.random() < 0.2:
            values[rnd.randrange(n)] = None
        cases.append(values)
    return cases


@pytest.mark.parametrize("values", _cases())
def test_numbers_aggregate_as_sqlite_does(values: list[Any]) -> None:
    low, mean, high, total = _sql(values)
    got = sqlagg.min_avg_max(values)
    assert _same(got[0], low) or got[0] is low is None
    assert _same(got[1], mean) or got[1] is mean is None
    assert _same(got[2], high) or got[2] is high is None
    assert _same(sqlagg.sum_(values), total) or sqlagg.sum_(values) is total is None
    assert _same(sqlagg.avg(values), mean) or sqlagg.avg(values) is mean is None


def test_texts_an_old_file_holds_aggregate_as_sqlite_does() -> None:
    """SQLite orders text after numbers in min/max and reads it as a number (or 0) in avg."""
    for values in ([40, "n/a", 42], ["12", 3, None], ["ERR!"], [b"\x01", 2.5, "7.5"]):
        assert sqlagg.min_avg_max(values) == _sql(values)[:3]
