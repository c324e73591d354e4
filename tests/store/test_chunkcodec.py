"""A chunk gives back exactly what went in (store/chunkcodec.py): values, types, nulls and order."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from gpufleet.collector.store import chunkcodec
from gpufleet.collector.store.chunkcodec import ChunkError, Row

GIB = 1 << 30


def _same(a: list[Row], b: list[Row]) -> bool:
    """Equal value for value, and of the same type (1 and 1.0 are not the same reading); nan is nan."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if type(x) is not type(y):
                return False
            if isinstance(x, float) and math.isnan(x):
                if not math.isnan(y):
                    return False
            elif x != y:
                return False
    return True


def _host_minute(rnd: random.Random, gpus: int, t0: float, *, jitter: float, nulls: float) -> list[Row]:
    rows = []
    for s in range(60):
        ts = t0 + s + rnd.gauss(0.0, jitter) if jitter else t0 + s
        for g in range(gpus):
            def maybe(v: Any) -> Any:
                return None if rnd.random() < nulls else v
            rows.append((10 + g, ts, maybe(rnd.randint(0, 100)), maybe(rnd.randint(0, 40)),
                         maybe(20 * GIB + rnd.randint(0, 1 << 20) * 4096), maybe(40 + s // 10),
                         maybe(rnd.randint(60_000, 700_000) / 1000),
                         maybe(1980 if rnd.random() < 0.9 else 1755),
                         2619, maybe(None), 0, maybe(rnd.randint(0, 3)),
                         maybe(rnd.choice(("sw_power_cap", "gpu_idle,sw_thermal_slowdown", None))),
                         maybe(None)))
    return chunkcodec.normalize(rows)


@pytest.mark.parametrize("jitter, nulls", [(0.0, 0.0), (0.0005, 0.0), (0.0005, 0.2), (0.0, 1.0)])
def test_a_host_minute_comes_back_exactly(jitter: float, nulls: float) -> None:
    rnd = random.Random(f"{jitter}{nulls}")
    rows = _host_minute(rnd, 8, 1_765_000_000.0, jitter=jitter, nulls=nulls)
    blob = chunkcodec.encode(rows)
    assert _same(chunkcodec.decode(blob), rows)
    for gpu in (10, 13, 17, 99):
        assert _same(chunkcodec.decode(blob, gpu), [r for r in rows if r[0] == gpu])


def test_readings_that_are_not_what_agents_send_come_back_as_stored() -> None:
    """What an old file's ``samples`` table may hold: texts in number columns, floats where integers go,
    power that is no whole number of milliwatts, inf and nan, integers near 64 bits, one sample alone,
    times that are not in order within a GPU, and a time shared by no other GPU."""
    t = 1_765_000_020.123456
    rows = chunkcodec.normalize([
        (1, t, 50, 20, 1 << 62, 40, 450.1234567, 1980, 2619, 30, 0, 0, "sw_power_cap", None),
        (1, t + 1, "n/a", 2.5, -(1 << 62) + 1, None, float("inf"), 0, 2619, 30, 0, 0, None, "GPU is lost"),
        (1, t + 2, 51, 20, 0, 41, float("nan"), 1, 1, 1, 1 << 40, 0, "x" * 3000, None),
        (2, t - 20.0, 1, 1, 1, 1, 1.0, 1, 1, 1, 1, 1, None, None),
        (2, float(1 << 40) / 3, 1, 1, 1, 1, -5.0, 1, 1, 1, 1, 1, None, None),
        (3, float("inf"), None, None, None, None, None, None, None, None, None, None, None, None),
    ])
    assert _same(chunkcodec.decode(chunkcodec.encode(rows)), rows)
    one = [(7, t, 1, 2, 3, 4, 5.0, 6, 7, 8, 9, 10, None, None)]
    assert _same(chunkcodec.decode(chunkcodec.encode(one)), one)
    two = [(7, t, *[None] * 12), (8, t, *[None] * 12)]  # one time, two GPUs
    assert _same(chunkcodec.decode(chunkcodec.encode(two)), two)


def test_noise_packs_smaller_than_its_rows_and_steady_readings_to_almost_nothing() -> None:
    rnd = random.Random(34)
    noisy = _host_minute(rnd, 8, 1_765_000_000.0, jitter=0.0005, nulls=0.0)
    steady = [(g, 1_765_000_000.0 + s, 95, 40, 20 * GIB, 60, 450.5, 1980, 2619, None, 0, 0, None, None)
              for g in range(8) for s in range(60)]
    # random readings (about 7 bytes of entropy a sample here) in under a quarter of the old row's 55 bytes
    assert len(chunkcodec.encode(noisy)) / len(noisy) < 55 / 4
    assert len(chunkcodec.encode(steady)) / len(steady) < 0.5


def test_a_sample_written_twice_keeps_its_first_writing() -> None:
    first = (1, 100.0, 50, *[None] * 11)
    again = (1, 100.0, 99, *[None] * 11)
    earlier = (1, 99.0, 1, *[None] * 11)
    assert chunkcodec.normalize([first, earlier, again]) == [earlier, first]


def test_a_damaged_chunk_is_a_chunk_error() -> None:
    blob = chunkcodec.encode([(1, 100.0, 50, *[None] * 11)])
    for bad in (blob[:5], blob[:1] + bytes(len(blob) - 1), b"\x09" + blob[1:]):
        with pytest.raises(ChunkError):
            chunkcodec.decode(bad)
