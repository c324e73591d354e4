"""The collector's wire decoder: msgspec for the frames every host sends each second, the reference decoder
(:func:`gpufleet.agent.wire.decode`) for everything else.

Why: the reference decoder validates field by field in Python (about 0.5 ms for a snapshot of 8 GPUs and 64
processes), which is most of the collector's CPU at fleet scale. msgspec parses and validates in C, straight
from bytes, into the collector's sample classes (:mod:`gpufleet.collector.model.sample`, a range per numeric
field), which the live view, rules and store read as they are: no second conversion. The agent never
imports this module: it stays standard library only.

The fast path is all or nothing, so behaviour never depends on which path ran. It takes only a snapshot, a
delta (1.3) or a heartbeat of this protocol version (or an older minor one), with no field this side does
not know, every number within its range, and text that needs no sanitising (the line is ASCII, no backslash
escape, no DEL). Any other line -- an event or hello, a newer minor version, an unknown field, a reading out
of range, a lone surrogate, NUL, a huge int, deep nesting, not JSON -- goes to the reference decoder, which
raises its own errors, sanitises, nulls or clamps, and counts in :class:`DecodeNotes` exactly as before. The
fast ranges are never wider than what the reference accepts unchanged (percentages: 0..100, where the
reference clamps), so a frame the fast path accepts decodes to the same objects either way (the reference's
converted by :func:`sample.from_wire`); tests/test_wirefast.py checks that over a corpus.
"""

from __future__ import annotations

from typing import Final

import msgspec
from gpufleet.agent import wire
from gpufleet.collector.model import sample

Range = tuple[float, float]

_DECODER: Final = msgspec.json.Decoder(sample.Snapshot | sample.Heartbeat | sample.Delta)
FastFrame = sample.Snapshot | sample.Heartbeat | sample.Delta


def _bounds(kind: msgspec.inspect.Type) -> Range | None:
    """The closed or open range msgspec checks on a numeric field (None: not numeric, or unbounded)."""
    if isinstance(kind, msgspec.inspect.UnionType):
        found = [b for b in map(_bounds, kind.types) if b is not None]
        return found[0] if found else None
    if isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
        lo = kind.ge if kind.ge is not None else getattr(kind, "gt", None)
        hi = kind.le if kind.le is not None else getattr(kind, "lt", None)
        return None if lo is None or hi is None else (lo, hi)
    return None


def _numeric(kind: msgspec.inspect.Type) -> bool:
    if isinstance(kind, msgspec.inspect.UnionType):
        return any(map(_numeric, kind.types))
    return isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType))


def ranges(cls: type[msgspec.Struct]) -> dict[str, Range | None]:
    """Every numeric field of a sample class with the range the fast path checks (None: no range, which
    tests/test_wirefast.py refuses). Read from the classes, which own them."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return {f.name: _bounds(f.type) for f in info.fields if _numeric(f.type)}


def fast_decode(line: bytes) -> FastFrame | None:
    """The frame, if the fast path takes ``line`` (module docstring); None: use the reference decoder."""
    if not line.isascii() or b"\\" in line or b"\x7f" in line:
        return None  # text to sanitise (or a hostile line): the reference decides
    try:
        frame: FastFrame = _DECODER.decode(line)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return frame


def decode(line: bytes | str, max_bytes: int = wire.MAX_LINE_BYTES,
           notes: wire.DecodeNotes | None = None) -> sample.Frame | sample.Delta:
    """Same contract as :func:`gpufleet.agent.wire.decode`, faster for the common frames, and the frame in
    the collector's classes (:mod:`gpufleet.collector.model.sample`) on either path."""
    if isinstance(line, bytes) and len(line) <= max_bytes:
        frame = fast_decode(line)
        if frame is not None:
            return frame
    return sample.from_wire(wire.decode(line, max_bytes, notes))
