"""One chunk of raw samples as bytes: a host's samples of one minute, column by column, compressed.

Why columns: a GPU's readings change little from one second to the next, or jitter around a level, and each
column holds one kind of number, so each is packed the way it varies, and a general-purpose compressor
squeezes out what repeats. Prometheus' TSDB does the same with its own bit packing (delta-of-delta
timestamps, XOR floats). A chunk holds one *host's* minute: its GPUs share the snapshot times, so the times
are stored once for all of them, and rows are sorted by (GPU, time), so a column is one GPU's series after
the other.

How an integer column is packed (:func:`_pack`): as it is, or as the differences between neighbours,
whichever varies less (noise around a level: as it is; a drift, a counter, a reading that holds: differences);
then, when one value is nearly all of it (a reading that holds, a GPU's index), as that value and the few
places that differ; else numbers that fit a byte as a msgpack list (one byte each); else wider numbers as
their offset from the smallest, in the fewest bytes that hold them, regrouped into byte planes (every value's
lowest byte, then every second byte...: the "shuffle" of Blosc and HDF5), so bytes that never change become
runs. Planes that look random (the milliwatts of a busy GPU's power) go into a zstd block of their own, so
they do not spoil the entropy coding of the rest. Everything runs in C (min, max, map, array, slicing, count).

Exact, always: a chunk gives back exactly the values that went in, with their types as SQLite gave them
back from the old ``samples`` table (REAL columns as floats): a reading that is no integer (a text in an old
file) keeps its column raw; a power reading that is not a whole number of milliwatts (NVML reports
milliwatts) keeps the column's floats; a time is stored as an integer count of 2**-k seconds, with the
smallest k that holds every time of the chunk exactly (k = 22 for today's times: 0.24 microseconds).
Nulls stay nulls (their positions are listed); a gap stays a gap (there is simply no sample in it).

Why zstd over the standard library's zlib: on these inputs zstd compresses a few percent better, takes a
tenth of the time (zlib sets up a new 256 KiB stream for every call: 1.2 to 2.3 us per sample on the head's
small parts, zstd with a context kept per thread 0.1), and can end a block where the random planes begin.
python-zstandard is maintained, ships wheels for every supported Python, and reads what any zstd writes.
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, itemgetter, mul, ne, sub, truediv
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
#: zstd's level: 6 packs this data ~2 % smaller than 3 for 0.1 us a sample more; beyond, little more.
LEVEL: Final = 6

# column encodings (the first element of an encoded column; None: every value is null)
_INTS, _INTS_NULLS, _RAW, _MILLI, _MILLI_NULLS, _TEXT, _TIME, _GRID = range(8)
# how integers are packed (:func:`_pack`): as they are, or as differences from the one before ...
_PLAIN, _DIFF = 0, 1
# ... and laid out: a list, one common value and the exceptions, or byte planes
_LIST, _SPARSE, _PLANES = 0, 1, 2
#: Byte width -> array typecode (unsigned, native order; written little-endian).
_TYPECODES: Final = {2: "H", 4: "I", 8: "Q"}
_BIG_ENDIAN: Final = sys.byteorder == "big"
#: A plane with more distinct bytes than this looks random: it goes to the noise block.
_NOISY: Final = 128
_HEAD: Final = struct.Struct("<II")  # body length, calm planes length

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class ChunkError(ValueError):
    """A stored blob this code cannot read (a damaged file, or written by a newer gpufleet)."""


def _deltas(values: Sequence[int]) -> list[int]:
    """v0, v1 - v0, v2 - v1, ...: ``accumulate`` gives the values back."""
    return list(map(sub, values, chain((0,), values)))


_INT64: Final = (1 << 62)


def _int_range(values: Sequence[Any]) -> tuple[int, int] | None:
    """(smallest, largest) of plain integers within +-2**62 (every difference fits 64 bits), else None."""
    if set(map(type, values)) != {int}:
        return None
    lo, hi = min(values), max(values)
    return (lo, hi) if -_INT64 < lo and hi < _INT64 else None


class _Planes:
    """Where wide columns' byte planes go while a chunk is encoded: the calm ones and the random-looking."""

    def __init__(self) -> None:
        self.calm = bytearray()
        self.noise = bytearray()

    def put(self, planes: bytes, width: int) -> list[int]:
        """Store one column's planes; returns where: [stream, offset, noisy plane bitmap]."""
        n = len(planes) // width
        noisy = 0
        for k in range(width):
            if len(set(planes[k * n:(k + 1) * n])) > _NOISY:
                noisy |= 1 << k
        where = [len(self.calm), len(self.noise), noisy]
        for k in range(width):
            (self.noise if noisy >> k & 1 else self.calm).extend(planes[k * n:(k + 1) * n])
        return where


def _sparse(seq: Sequence[int]) -> list[Any] | None:
    """[common value, gaps between the places that differ, their values] when one value is 7/8 of ``seq``."""
    n = len(seq)
    if n < 16 or len(set(seq[:64])) > 16:  # plainly many values: not worth a count
        return None
    counts = Counter(seq)
    if len(counts) > 16:
        return None
    common, times = counts.most_common(1)[0]
    if (n - times) * 8 > n:
        return None
    at = list(compress(range(n), map(ne, seq, repeat(common))))
    return [common, _deltas(at), [seq[i] for i in at]]


def _pack(values: Sequence[int], planes: _Planes, lo: int, hi: int, starts: Sequence[int] = ()) -> list[Any]:
    """Integers within +-2**62 (``lo`` the smallest, ``hi`` the largest), packed (module docstring).
    ``starts``: where each GPU's series begins (a jump there says nothing about how neighbours differ)."""
    if lo == hi:
        return [_PLAIN, _SPARSE, lo, [], []]
    how, seq, base, top = _PLAIN, values, lo, hi
    # differences when, over the first GPU's series, they span no more than the values (a drift, a walk,
    # a reading that holds); the jump where a GPU's series begins says nothing about either
    probe = values[:starts[0] if starts else 64]
    if len(probe) > 2:
        steps = list(map(sub, probe[1:], probe))
        if max(steps) - min(steps) <= max(probe) - min(probe):
            how, seq = _DIFF, _deltas(values)
            base, top = min(seq), max(seq)
    sparse = _sparse(seq)
    if sparse is not None:  # one value nearly everywhere: a reading that holds, a flag that is rarely up
        return [how, _SPARSE, *sparse]
    span = top - base
    if span < 1 << 8:
        return [how, _LIST, seq]
    width = 2 if span < 1 << 16 else 4 if span < 1 << 32 else 8
    packed = array(_TYPECODES[width], map(sub, seq, repeat(base)) if base else seq)
    if _BIG_ENDIAN:
        packed.byteswap()
    raw = packed.tobytes()
    return [how, _PLANES, base, width, *planes.put(b"".join([raw[k::width] for k in range(width)]), width)]


class _Streams:
    """A decoded chunk's plane streams."""

    __slots__ = ("calm", "noise")

    def __init__(self, calm: memoryview, noise: memoryview) -> None:
        self.calm = calm
        self.noise = noise


def _unpack(enc: list[Any], n: int, streams: _Streams) -> list[int]:
    """The ``n`` integers :func:`_pack` packed."""
    how, layout = enc[0], enc[1]
    if layout == _LIST:
        out = list(enc[2])
    elif layout == _SPARSE:
        out = [enc[2]] * n
        for i, v in zip(accumulate(enc[3]), enc[4], strict=True):
            out[i] = v
    elif layout == _PLANES:
        base, width, calm_at, noise_at, noisy = enc[2:]
        raw = bytearray(n * width)
        for k in range(width):
            if noisy >> k & 1:
                raw[k::width] = streams.noise[noise_at:noise_at + n]
                noise_at += n
            else:
                raw[k::width] = streams.calm[calm_at:calm_at + n]
                calm_at += n
        packed = array(_TYPECODES[width])
        packed.frombytes(raw)
        if _BIG_ENDIAN:
            packed.byteswap()
        out = packed.tolist()
        if base:
            out = list(map(add, out, repeat(base)))
    else:
        raise ChunkError(f"unknown integer layout {layout!r}")
    return list(accumulate(out)) if how == _DIFF else out


def _encode_column(col: int, values: Sequence[Any], planes: _Planes, starts: Sequence[int] = ()) -> Any:
    if col in _TEXT_COLS:
        return _encode_text(values, planes)
    first = values[0]
    if values.count(first) == len(values):  # one value all minute (a fan not reported, ECC counts, a clock)
        if first is None:
            return None
        if type(first) is int and -_INT64 < first < _INT64:
            return [_INTS, [_PLAIN, _SPARSE, first, [], []]]
    present = values
    nulls: list[int] = []
    if None in values:
        nulls = [i for i, v in enumerate(values) if v is None]
        if len(nulls) == len(values):
            return None
        present = [v for v in values if v is not None]
        starts = ()  # positions moved: a slightly worse guess, never a wrong value
    if col == _POWER_COL:
        if set(map(type, present)) <= {int, float}:
            try:
                milli = list(map(round, map(mul, present, repeat(1000.0))))
            except (OverflowError, ValueError):  # inf, nan
                milli = []
            bounds = _int_range(milli) if milli else None
            if bounds is not None and list(map(truediv, milli, repeat(1000.0))) == list(present):
                packed = _pack(milli, planes, *bounds, starts)
                return [_MILLI_NULLS, nulls, packed] if nulls else [_MILLI, packed]
        return [_RAW, _floats(values)]
    bounds = _int_range(present)
    if bounds is not None:
        packed = _pack(present, planes, *bounds, starts)
        return [_INTS_NULLS, nulls, packed] if nulls else [_INTS, packed]
    return [_RAW, list(values)]


def _encode_text(values: Sequence[Any], planes: _Planes) -> Any:
    """A text column as a small dictionary (null first) and each row's index into it."""
    words = set(values)
    if words == {None}:
        return None
    if not set(map(type, words)) <= {str, type(None)}:
        return [_RAW, list(values)]
    order = [None, *sorted(words - {None})]
    index = dict(zip(order, range(len(order)), strict=True))
    return [_TEXT, order[1:], _pack(list(map(index.__getitem__, values)), planes, 0, len(order) - 1)]


def _floats(values: Sequence[Any]) -> list[Any]:
    """A REAL column's integers as floats (what SQLite gave back from the old table)."""
    return [float(v) if type(v) is int else v for v in values]


def _den_bits(t: float) -> int:
    return int(t.as_integer_ratio()[1]).bit_length() - 1


def _encode_times(values: Sequence[Any], planes: _Planes) -> Any:
    """Times as integer counts of 2**-k s: how many, the first, the first step, then the steps (packed as
    they are, or as the change of each step: a steady interval packs to nothing)."""
    if set(map(type, values)) <= {int, float}:
        try:
            k = max(map(_den_bits, values))
        except (OverflowError, ValueError):  # inf, nan: kept as they are
            return [_RAW, _floats(values)]
        scale = float(1 << k)
        q = list(map(int, map(mul, values, repeat(scale))))
        if len(q) == 1:
            return [_TIME, k, 1, q[0], 0, None]
        steps = _deltas(q)[1:]
        rest = steps[1:]
        bounds = _int_range(rest) if rest else (0, 0)
        if _int_range(q) is not None and bounds is not None:
            return [_TIME, k, len(q), q[0], steps[0], _pack(rest, planes, *bounds) if rest else None]
    return [_RAW, _floats(values)]


def encode(rows: Sequence[Row]) -> bytes:
    """Pack rows of (gpu_id, *COLUMNS) of one host: sorted by (gpu_id, ts) and without two rows of one GPU
    at one time (the caller's job: :func:`normalize`), so each column holds one GPU's series after the
    other and neighbours differ little. The times of the host's snapshots are stored once (its GPUs share
    them); each row refers to its time by index."""
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * (WIDTH + 1)
    times = sorted(set(cols[1]))
    gpus = cols[0]
    starts = list(compress(range(1, n), map(ne, gpus[1:], gpus)))
    planes = _Planes()
    ids = [gpus[i] for i in (0, *starts)] if n else []
    if n == len(ids) * len(times) and cols[1] == tuple(times) * len(ids):
        # the usual minute: every GPU at every time (the grid is the GPU ids; no row needs its own index)
        where: list[Any] = [[_GRID, ids], None]
    else:
        at = dict(zip(times, range(len(times)), strict=True))
        where = [_encode_column(-1, gpus, planes), _encode_column(-1, list(map(at.__getitem__, cols[1])),
                                                                    planes, starts)]
    body = [n, _encode_times(times, planes), *where]
    body += (_encode_column(c, cols[c + 1], planes, starts) for c in range(1, WIDTH))
    packed = _encoder.encode(body)
    head = _HEAD.pack(len(packed), len(planes.calm))
    size = len(head) + len(packed) + len(planes.calm) + len(planes.noise)
    z = _codecs.compressor.compressobj(size=size)
    out = [bytes((COLUMNAR,)), z.compress(head), z.compress(packed), z.compress(planes.calm)]
    if planes.noise:
        # random planes: a block (and an entropy table) of their own
        out.append(z.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
        out.append(z.compress(planes.noise))
    out.append(z.flush())
    return b"".join(out)


def encode_rows(rows: Sequence[Row]) -> bytes:
    """Pack rows as they are (a head part: a host's samples since the last flush). Not compressed: a part
    lives a minute or two, and zstd's setup on a few hundred bytes costs more than the pages it saves."""
    try:
        return bytes((ROWS,)) + _encoder.encode(rows)
    except OverflowError:  # an integer beyond 64 bits (admission refuses them): stored as null, as before
        fits = [tuple(None if type(v) is int and not -_INT64 * 2 <= v < _INT64 * 2 else v for v in r)
                for r in rows]
        return bytes((ROWS,)) + _encoder.encode(fits)


class _Codecs(threading.local):
    """zstd contexts are not thread-safe: one pair per thread (the writer's, each reader's), reused."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False, write_dict_id=False)
        self.decompressor = zstandard.ZstdDecompressor()


_codecs = _Codecs()


def _unzstd(data: bytes | memoryview) -> bytes:
    return _codecs.decompressor.decompress(data)


_GPU_TS: Final = itemgetter(0, 1)


def normalize(rows: Iterable[Row]) -> list[Row]:
    """Rows as :func:`encode` wants them: the first row of a (gpu_id, ts) wins (a replay, or a sample seen
    again after a clock step, never replaces what was stored), sorted by (gpu_id, ts)."""
    ordered = rows if isinstance(rows, list) else list(rows)
    # a dict keeps the last value given for a key: walked backwards, that is each key's first row
    first = dict(zip(map(_GPU_TS, reversed(ordered)), reversed(ordered), strict=True))
    return sorted(first.values(), key=_GPU_TS)


def _decode_column(enc: Any, n: int, streams: _Streams) -> list[Any]:
    if enc is None:
        return [None] * n
    kind = enc[0]
    if kind == _INTS:
        return _unpack(enc[1], n, streams)
    if kind == _MILLI:
        return list(map(truediv, _unpack(enc[1], n, streams), repeat(1000.0)))
    if kind == _RAW:
        return list(enc[1])
    if kind == _TEXT:
        words = [None, *enc[1]]
        return [words[i] for i in _unpack(enc[2], n, streams)]
    if kind in (_INTS_NULLS, _MILLI_NULLS):
        nulls = enc[1]
        present: Iterable[Any] = _unpack(enc[2], n - len(nulls), streams)
        if kind == _MILLI_NULLS:
            present = map(truediv, present, repeat(1000.0))
        out: list[Any] = list(present)
        for i in nulls:
            out.insert(i, None)
        return out
    if kind == _TIME:
        _, k, count, first, step, rest = enc
        steps = [step, *(_unpack(rest, count - 2, streams) if rest is not None else ())] if count > 1 else []
        return list(map(truediv, accumulate([first, *steps]), repeat(float(1 << k))))
    raise ChunkError(f"unknown column encoding {kind!r}")


_raw_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])


class _Chunk:
    """A chunk opened for reading: its columns still packed (each decoded when asked for)."""

    __slots__ = ("body", "n", "streams")

    def __init__(self, blob: bytes) -> None:
        if not blob or blob[0] != COLUMNAR:
            raise ChunkError(f"unknown chunk format {blob[:1]!r} (written by a newer gpufleet?)")
        data = memoryview(_unzstd(memoryview(blob)[1:]))
        size, calm = _HEAD.unpack_from(data)
        at = _HEAD.size
        self.body = _raw_decoder.decode(data[at:at + size])
        at += size
        self.streams = _Streams(data[at:at + calm], data[at + calm:])
        self.n = int(_decoder.decode(self.body[0]))

    def column(self, i: int, n: int) -> list[Any]:
        return _decode_column(_decoder.decode(self.body[i]), n, self.streams)


Columns = tuple[list[Any], list[float], dict[int, list[Any]]]


def decode_columns(blob: bytes, gpu_id: int | None = None,
                   wanted: Sequence[int] = range(1, WIDTH)) -> Columns:
    """(gpu ids, times, {column: values}) of the rows of ``gpu_id`` (every row: None) in a stored blob, in
    stored order; ``wanted``: indexes into COLUMNS (1.. : the readings; times always come)."""
    try:
        chunk = _Chunk(blob)
        n = chunk.n
        grid = _decoder.decode(chunk.body[2])
        times = chunk.column(1, 0)
        if grid and grid[0] == _GRID:
            ids = grid[1]
            per = len(times)
            gpus = [g for g in ids for _ in range(per)]
        else:
            gpus = chunk.column(2, n)
        lo, hi = (0, n) if gpu_id is None else (bisect_left(gpus, gpu_id), bisect_right(gpus, gpu_id))
        if lo == hi:
            return [], [], {c: [] for c in wanted}
        if grid and grid[0] == _GRID:
            ts = (times * len(ids))[lo:hi]
        else:
            tidx = chunk.column(3, n)[lo:hi]
            ts = [times[i] for i in tidx]
        return gpus[lo:hi], ts, {c: chunk.column(c + 3, n)[lo:hi] for c in wanted}
    except ChunkError:
        raise
    except (zstandard.ZstdError, msgspec.DecodeError, struct.error, IndexError, TypeError, ValueError,
            KeyError) as exc:
        raise ChunkError(f"unreadable chunk ({type(exc).__name__}: {exc})") from exc


def decode(blob: bytes, gpu_id: int | None = None) -> list[Row]:
    """The rows (gpu_id, *COLUMNS) of a chunk (of ``gpu_id`` only, when given), in stored order."""
    gpus, ts, cols = decode_columns(blob, gpu_id)
    return list(zip(gpus, ts, *(cols[c] for c in range(1, WIDTH)), strict=True))


#: A head part's rows: tuples, the REAL columns (time, power) as floats, as SQLite gave them back.
_Part = list[tuple[Any, float, Any, Any, Any, Any, float | None, Any, Any, Any, Any, Any, Any, Any]]
_part_decoder = msgspec.msgpack.Decoder(_Part)


def decode_rows(blob: bytes) -> list[Row]:
    """The rows of a head part, as written."""
    if not blob or blob[0] != ROWS:
        raise ChunkError(f"unknown head part format {blob[:1]!r} (written by a newer gpufleet?)")
    try:
        return _part_decoder.decode(memoryview(blob)[1:])
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise ChunkError(f"unreadable head part ({type(exc).__name__}: {exc})") from exc
