"""The collector's wire decoder: msgspec for the frames every host sends each second, the reference decoder
(:func:`gpufleet.agent.wire.decode`) for everything else.

Why: the reference decoder validates field by field in Python (about 0.5 ms for a snapshot of 8 GPUs and 64
processes), which is most of the collector's CPU at fleet scale. msgspec parses and validates in C, straight
from bytes, into typed Structs built here from the wire dataclasses, with a range per numeric field
(:data:`RANGES`). The agent never imports this module: it stays standard library only.

The fast path is all or nothing, so behaviour never depends on which path ran. It takes only a snapshot
or a heartbeat of this protocol version (or an older minor one), with no field this side does not know,
every number within its range, and text that needs no sanitising (the line is ASCII, no backslash escape,
no DEL). Any other line -- an event or hello, a newer minor version, an unknown field, a reading out of
range, a lone surrogate, NUL, a huge int, deep nesting, not JSON -- goes to the reference decoder, which
raises its own errors, sanitises, nulls or clamps, and counts in :class:`DecodeNotes` exactly as before.
The fast ranges are never wider than what the reference accepts unchanged (percentages: 0..100, where the
reference clamps), so a frame the fast path accepts decodes to the same objects either way;
tests/test_wirefast.py checks that over a corpus.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from typing import Annotated, Any, Final, Literal

import msgspec
from gpufleet.agent import wire
from msgspec import Meta

#: The protocol versions whose every field this side knows (this major; this minor or an older one). A frame
#: of a newer minor goes to the reference, which counts the fields this side does not know.
_KNOWN_VERSIONS: Final = tuple(f"{wire.PROTO_MAJOR}.{m}" for m in range(wire.PROTO_MINOR + 1))

Range = tuple[float, float]
_PCT: Final[Range] = (0, 100)
_MEM: Final[Range] = (0, wire.U53)
_TEMP: Final[Range] = wire.TEMP_RANGE
_POWER: Final[Range] = (0, wire.POWER_MAX)
_CLOCK: Final[Range] = (0, wire.CLOCK_MAX)
_TS: Final[Range] = (0, wire.U53)  # the reference takes any finite time; odd ones go there
_SEQ: Final[Range] = (0, wire.U63)

#: The range of every numeric field the fast path decodes, per wire type. The same bounds as the reference
#: decoder (agent/wire.py); a value outside sends the frame to the reference, which decides. A numeric field
#: missing here never passes the fast path (and tests/test_wirefast.py names it).
RANGES: Final[dict[type, dict[str, Range]]] = {
    wire.Snapshot: {"ts": _TS, "seq": _SEQ},
    wire.Heartbeat: {"ts": _TS, "seq": _SEQ},
    wire.GpuSample: {
        "index": (0, wire.INDEX_MAX), "util_gpu": _PCT, "util_mem": _PCT, "memory_total": _MEM,
        "memory_used": _MEM, "memory_reserved": _MEM, "temperature": _TEMP, "temp_slowdown": _TEMP,
        "temp_shutdown": _TEMP, "power_draw": _POWER, "power_limit": _POWER, "clock_sm": _CLOCK,
        "clock_mem": _CLOCK, "fan_speed": (0, 1000), "ecc_corrected": _MEM, "ecc_uncorrected": _MEM,
        "sm_active": _PCT,
    },
    wire.ProcessSample: {
        "pid": (0, wire.PID_MAX), "gpu_memory": _MEM, "sm_util": _PCT, "mem_util": _PCT,
        "uid": (0, wire.UID_MAX), "start_time": (0, wire.U53), "ppid": (0, wire.PID_MAX),
    },
    wire.MigInstance: {
        "gi_id": (0, wire.INDEX_MAX), "ci_id": (0, wire.INDEX_MAX), "memory_total": _MEM,
        "memory_used": _MEM,
    },
}

#: Text fields whose empty value the reference replaces with the default ("" kind -> "compute").
_NON_EMPTY: Final = {(wire.ProcessSample, "kind")}


def numeric_fields(cls: type) -> list[str]:
    """The int and float fields of a wire dataclass (optional or not)."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in dataclasses.fields(cls)
            if {int, float} & set(typing.get_args(hints[f.name]) or (hints[f.name],))]


def _fast_type(cls: type, name: str, hint: Any, structs: dict[type, Any]) -> Any:
    """The msgspec type of one field: the dataclass's type with its range, nested types as Structs."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, [_fast_type(cls, name, a, structs) for a in args])
    if typing.get_origin(hint) is list:
        (item,) = args
        return list.__class_getitem__(structs.get(item, item))
    if hint in (int, float):
        rng = RANGES.get(cls, {}).get(name)
        if rng is None:
            return type(None)  # no range known: only null passes; any value goes to the reference
        lo, hi = rng
        if hint is float and max(abs(lo), abs(hi)) >= wire.U53:
            # msgspec rounds an int to a float before the check (2**53 + 1 passes as 2**53): strict bounds
            return Annotated[float, Meta(gt=lo, lt=hi)]
        return Annotated[hint, Meta(ge=lo, le=hi)]
    if hint is str and (cls, name) in _NON_EMPTY:
        return Annotated[str, Meta(min_length=1)]
    return hint


def _struct(cls: type, structs: dict[type, Any], tag: str | None = None) -> Any:
    """A msgspec Struct with the fields of wire dataclass ``cls``, in the same order (so a Struct's
    ``astuple`` is the dataclass's positional arguments). Frames carry ``proto`` (exactly this version) and
    ``type`` (the tag); unknown fields fail."""
    hints = typing.get_type_hints(cls)
    spec: list[Any] = []
    for f in dataclasses.fields(cls):
        if f.name == "type":
            continue
        if f.name == "proto":
            spec.insert(0, (f.name, Literal[_KNOWN_VERSIONS]))  # required: before the defaults
            continue
        kind = _fast_type(cls, f.name, hints[f.name], structs)
        if f.default is not dataclasses.MISSING:
            spec.append((f.name, kind, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            spec.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        else:
            spec.append((f.name, kind))
    extra: dict[str, Any] = {"tag_field": "type", "tag": tag} if tag else {}
    struct = msgspec.defstruct(f"Fast{cls.__name__}", spec, forbid_unknown_fields=True, gc=False, **extra)
    structs[cls] = struct
    return struct


def _structs() -> dict[type, Any]:
    structs: dict[type, Any] = {}
    for cls in (wire.ProcessSample, wire.MigInstance, wire.GpuSample):
        _struct(cls, structs)
    _struct(wire.Snapshot, structs, tag="snapshot")
    _struct(wire.Heartbeat, structs, tag="heartbeat")
    return structs


STRUCTS: Final = _structs()
_DECODER: Final = msgspec.json.Decoder(STRUCTS[wire.Snapshot] | STRUCTS[wire.Heartbeat])
_SNAPSHOT: Final = STRUCTS[wire.Snapshot]
_astuple = msgspec.structs.astuple


def _gpu(g: Any) -> wire.GpuSample:
    gpu = wire.GpuSample(*_astuple(g))
    gpu.processes = [wire.ProcessSample(*_astuple(p)) for p in g.processes]
    if g.mig_instances:
        gpu.mig_instances = [wire.MigInstance(*_astuple(m)) for m in g.mig_instances]
    return gpu


def fast_decode(line: bytes) -> wire.Snapshot | wire.Heartbeat | None:
    """The frame, if the fast path takes ``line`` (module docstring); None: use the reference decoder."""
    if not line.isascii() or b"\\" in line or b"\x7f" in line:
        return None  # text to sanitise (or a hostile line): the reference decides
    try:
        obj = _DECODER.decode(line)
    except (msgspec.MsgspecError, RecursionError):
        return None
    if type(obj) is _SNAPSHOT:
        return wire.Snapshot(ts=obj.ts, seq=obj.seq, gpus=[_gpu(g) for g in obj.gpus])
    return wire.Heartbeat(ts=obj.ts, seq=obj.seq)


def decode(line: bytes | str, max_bytes: int = wire.MAX_LINE_BYTES,
           notes: wire.DecodeNotes | None = None) -> wire.Frame:
    """Same contract as :func:`gpufleet.agent.wire.decode`, faster for the common frames."""
    if isinstance(line, bytes) and len(line) <= max_bytes:
        frame = fast_decode(line)
        if frame is not None:
            return frame
    return wire.decode(line, max_bytes, notes)
