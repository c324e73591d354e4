"""One chunk of raw samples as bytes: a GPU's samples of one minute, column by column, compressed.

Why columns: a GPU's readings change little from one second to the next, so each column is stored as the
differences between neighbours (timestamps as differences of differences: a steady interval costs nothing)
and a general-purpose compressor squeezes out what repeats. Prometheus' TSDB does the same with its own bit
packing; here msgpack (msgspec, already the wire decoder's library: small integers take one byte, and it
runs in C) packs the integers, and zstd (python-zstandard) compresses them. A chunk holds one *host's*
minute: its GPUs share the snapshot times, so the times are stored once for all of them.

Exact, always: a chunk gives back exactly the values that went in, with their types as SQLite gave them
back from the old ``samples`` table (REAL columns as floats): a reading that is no integer (a text in an old
file) keeps its column raw; a power reading that is not a whole number of milliwatts (NVML reports
milliwatts) keeps the column's floats; a time is stored as an integer count of 2**-k seconds, with the
smallest k that holds every time of the chunk exactly (k = 22 for today's times: 0.24 microseconds).
Nulls stay nulls (their positions are listed); a gap stays a gap (there is simply no sample in it).

Why zstd over the standard library's zlib (tests/bench/chunk_bench.py prints both): on these inputs they
compress alike (within a few percent), but zlib sets up a new 256 KiB stream for every call, which on the
head's small parts (a host's last two seconds) costs more than the compression itself: zlib takes 1.2 to
2.3 us per sample there and ~0.3 on chunks, zstd with a context kept per thread 0.1 and 0.06.
python-zstandard is maintained, ships wheels for every supported Python, and reads what any zstd writes.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import mul, sub, truediv
from typing import Any, Final

import msgspec
import zstandard

#: The sample columns, in order (the old ``samples`` table's, less gpu_id): what a chunk holds per sample.
COLUMNS: Final = ("ts", "util", "util_mem", "mem_used", "temp", "power", "clock_sm", "clock_mem", "fan",
                  "ecc_corrected", "ecc_uncorrected", "throttle", "error")
#: A sample row: (gpu_id, *COLUMNS), the shape ingest builds and readers get back.
Row = tuple[Any, ...]
WIDTH: Final = len(COLUMNS)
TS, UTIL, UTIL_MEM, MEM_USED, TEMP, POWER = range(6)
_POWER_COL: Final = POWER
_TEXT_COLS: Final = frozenset({COLUMNS.index("throttle"), COLUMNS.index("error")})

#: First byte of a stored blob: how the rest is packed.
COLUMNAR: Final = 1  # a chunk: columns, zstd
ROWS: Final = 2  # a head part: the rows as they are (msgpack), zstd: written once, read once, cheap
LEVEL: Final = 3

# column encodings (the first element of an encoded column; None: every value is null)
_DELTA, _DELTA_NULLS, _RAW, _MILLI, _MILLI_NULLS, _TEXT, _TIME = range(7)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class ChunkError(ValueError):
    """A stored blob this code cannot read (a damaged file, or written by a newer gpufleet)."""


def _deltas(values: list[int]) -> list[int]:
    """v0, v1 - v0, v2 - v1, ...: ``accumulate`` gives the values back."""
    out = [values[0]]
    out += map(sub, values[1:], values[:-1])
    return out


_INT64: Final = (1 << 62)


def _is_ints(values: list[Any]) -> bool:
    """Plain integers within +-2**62, so every difference fits msgpack's 64 bits."""
    return set(map(type, values)) == {int} and -_INT64 < min(values) and max(values) < _INT64


def _encode_column(col: int, values: list[Any]) -> Any:
    if col in _TEXT_COLS:
        return _encode_text(values)
    present = values
    nulls: list[int] = []
    if None in values:
        nulls = [i for i, v in enumerate(values) if v is None]
        if len(nulls) == len(values):
            return None
        present = [v for v in values if v is not None]
    if col == _POWER_COL:
        if set(map(type, present)) <= {int, float}:
            try:
                milli = list(map(round, map(mul, present, repeat(1000.0))))
            except (OverflowError, ValueError):  # inf, nan
                milli = []
            if milli and list(map(truediv, milli, repeat(1000.0))) == present and _is_ints(milli):
                return [_MILLI_NULLS, nulls, _deltas(milli)] if nulls else [_MILLI, _deltas(milli)]
        return [_RAW, _floats(values)]
    if col != _POWER_COL and _is_ints(present):
        return [_DELTA_NULLS, nulls, _deltas(present)] if nulls else [_DELTA, _deltas(present)]
    return [_RAW, values]


def _encode_text(values: list[Any]) -> Any:
    if not any(v is not None for v in values):
        return None
    if not all(v is None or type(v) is str for v in values):
        return [_RAW, values]
    words: dict[str | None, int] = {None: 0}
    index = [words.setdefault(v, len(words)) for v in values]
    return [_TEXT, list(words)[1:], index]


def _floats(values: list[Any]) -> list[Any]:
    """A REAL column's integers as floats (what SQLite gave back from the old table)."""
    return [float(v) if type(v) is int else v for v in values]


def _den_bits(t: float) -> int:
    return int(t.as_integer_ratio()[1]).bit_length() - 1


def _encode_times(values: list[Any]) -> Any:
    """Times as integer counts of 2**-k s: the first, the first step, then the change of each step."""
    if set(map(type, values)) <= {int, float}:
        try:
            k = max(map(_den_bits, values))
        except (OverflowError, ValueError):  # inf, nan: kept as they are
            return [_RAW, _floats(values)]
        scale = float(1 << k)
        q = list(map(int, map(mul, values, repeat(scale))))
        steps = _deltas(q)
        if _is_ints(steps):
            return [_TIME, k, steps[:1] + _deltas(steps[1:]) if len(steps) > 1 else steps]
    return [_RAW, _floats(values)]


def encode(rows: Sequence[Row]) -> bytes:
    """Pack rows of (gpu_id, *COLUMNS) of one host: sorted by (gpu_id, ts) and without two rows of one GPU
    at one time (the caller's job: :func:`normalize`), so each column holds one GPU's series after the
    other and neighbours differ little. The times of the host's snapshots are stored once (its GPUs share
    them); each row refers to its time by index."""
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * (WIDTH + 1)
    times = sorted(set(cols[1]))
    if len(times) == n or not times:
        tidx: list[int] = list(range(n))
        if times != list(cols[1]):
            tidx = [times.index(t) for t in cols[1]]  # one row per time but not in time order: rare
    else:
        where = {t: i for i, t in enumerate(times)}
        tidx = [where[t] for t in cols[1]]
    body = [n, _encode_times(times), _encode_column(-1, list(cols[0])), _encode_column(-1, tidx)]
    body += (_encode_column(c, list(cols[c + 1])) for c in range(1, WIDTH))
    return bytes((COLUMNAR,)) + _zstd().compress(_encoder.encode(body))


def encode_rows(rows: Sequence[Row]) -> bytes:
    """Pack rows as they are (a head part: a host's samples since the last flush)."""
    try:
        packed = _encoder.encode(rows)
    except OverflowError:  # an integer beyond 64 bits (admission refuses them): stored as null, as before
        packed = _encoder.encode([tuple(None if type(v) is int and not -(1 << 63) <= v < (1 << 63) else v
                                        for v in r) for r in rows])
    return bytes((ROWS,)) + _zstd().compress(packed)


class _Codecs(threading.local):
    """zstd contexts are not thread-safe: one pair per thread (the writer's, each reader's), reused."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False, write_dict_id=False)
        self.decompressor = zstandard.ZstdDecompressor()


_codecs = _Codecs()


def _zstd() -> zstandard.ZstdCompressor:
    return _codecs.compressor


def _unzstd(data: bytes | memoryview) -> bytes:
    return _codecs.decompressor.decompress(data)


def normalize(rows: Iterable[Row]) -> list[Row]:
    """Rows as :func:`encode` wants them: the first row of a (gpu_id, ts) wins (a replay, or a sample seen
    again after a clock step, never replaces what was stored), sorted by (gpu_id, ts)."""
    seen: dict[tuple[Any, Any], Row] = {}
    for r in rows:
        seen.setdefault((r[0], r[1]), r)
    return sorted(seen.values(), key=_gpu_ts)


def _gpu_ts(r: Row) -> tuple[Any, Any]:
    return r[0], r[1]


def _decode_column(enc: Any, n: int) -> list[Any]:
    if enc is None:
        return [None] * n
    kind = enc[0]
    if kind == _DELTA:
        return list(accumulate(enc[1]))
    if kind == _MILLI:
        return list(map(truediv, accumulate(enc[1]), repeat(1000.0)))
    if kind == _RAW:
        return list(enc[1])
    if kind == _TEXT:
        words = [None, *enc[1]]
        return [words[i] for i in enc[2]]
    if kind in (_DELTA_NULLS, _MILLI_NULLS):
        present: Iterable[Any] = accumulate(enc[2])
        if kind == _MILLI_NULLS:
            present = map(truediv, present, repeat(1000.0))
        out: list[Any] = list(present)
        for i in enc[1]:
            out.insert(i, None)
        return out
    if kind == _TIME:
        scale = float(1 << enc[1])
        steps = enc[2]
        q = accumulate([steps[0], *accumulate(steps[1:])]) if len(steps) > 1 else steps
        return list(map(truediv, q, repeat(scale)))
    raise ChunkError(f"unknown column encoding {kind!r}")


_Body = list[msgspec.Raw]
_raw_decoder = msgspec.msgpack.Decoder(_Body)


def _body(blob: bytes) -> _Body:
    if blob[0] != COLUMNAR:
        raise ChunkError(f"unknown chunk format {blob[0]} (written by a newer gpufleet?)")
    return _raw_decoder.decode(_unzstd(memoryview(blob)[1:]))


def _col(body: _Body, i: int, n: int) -> list[Any]:
    return _decode_column(_decoder.decode(body[i]), n)


Columns = tuple[list[Any], list[float], dict[int, list[Any]]]


def decode_columns(blob: bytes, gpu_id: int | None = None,
                   wanted: Sequence[int] = range(1, WIDTH)) -> Columns:
    """(gpu ids, times, {column: values}) of the rows of ``gpu_id`` (every row: None) in a stored blob, in
    stored order; ``wanted``: indexes into COLUMNS (1.. : the readings; times always come)."""
    try:
        body = _body(blob)
        n = int(_decoder.decode(body[0]))
        gpus = _col(body, 2, n)
        lo, hi = (0, n) if gpu_id is None else (bisect_left(gpus, gpu_id), bisect_right(gpus, gpu_id))
        if lo == hi:
            return [], [], {c: [] for c in wanted}
        times = _col(body, 1, 0)
        tidx = _col(body, 3, n)[lo:hi]
        ts = [times[i] for i in tidx]
        return gpus[lo:hi], ts, {c: _col(body, c + 3, n)[lo:hi] for c in wanted}
    except ChunkError:
        raise
    except (zstandard.ZstdError, msgspec.DecodeError, IndexError, TypeError, ValueError, KeyError) as exc:
        raise ChunkError(f"unreadable chunk ({type(exc).__name__}: {exc})") from exc


def decode(blob: bytes, gpu_id: int | None = None) -> list[Row]:
    """The rows (gpu_id, *COLUMNS) of a chunk (of ``gpu_id`` only, when given), in stored order."""
    gpus, ts, cols = decode_columns(blob, gpu_id)
    return list(zip(gpus, ts, *(cols[c] for c in range(1, WIDTH)), strict=True))


def decode_rows(blob: bytes) -> list[Row]:
    """The rows of a head part, as written; REAL columns (times, power) as floats, as SQLite gave them."""
    if blob[0] != ROWS:
        raise ChunkError(f"unknown head part format {blob[0]} (written by a newer gpufleet?)")
    try:
        rows = _decoder.decode(_unzstd(memoryview(blob)[1:]))
        return [_real(r) for r in rows]
    except (zstandard.ZstdError, msgspec.DecodeError, TypeError, ValueError) as exc:
        raise ChunkError(f"unreadable head part ({type(exc).__name__}: {exc})") from exc


def _real(r: list[Any]) -> Row:
    ts, power = r[1], r[6]
    if type(ts) is int:
        r[1] = float(ts)
    if type(power) is int:
        r[6] = float(power)
    return tuple(r)
