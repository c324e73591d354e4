"""The gpufleet wire protocol: versioned JSON lines from agent to collector.

One module owns the format so the agent (which encodes) and the collector (which decodes and
validates) can never drift apart; the frames themselves, and the version they speak, are agent/frames.py
(read through this module as well). Standard library only: the agent ships as a zipapp.

Frames are JSON objects, one per line, each with ``"type"`` and ``"proto"`` ("MAJOR.MINOR").
- ``hello``: sent once first. Agent/driver/NVML/CUDA versions, hostname (informational only: the
  collector identifies a host by the address it dialled), GPU inventory.
- ``snapshot``: a sample of every GPU with its processes.
- ``delta`` (1.3): a sample as what changed since the frame before it (:mod:`gpufleet.agent.delta`: the
  format, the agent's encoder and the negotiation on the agent's stdin). Only after the collector asked.
- ``event``: something that happened between samples (Xid, GPU lost, driver errors).
- ``heartbeat``: liveness when there is nothing else to say.

Text is made safe once, here, at decode (:func:`safe_text`): everything downstream may store, print and
send any string of a frame. Numbers are range-checked here too: an identity (GPU index, pid, uid, seq,
xid) out of range makes the frame malformed; a reading (memory, temperature, power, clocks, ECC counts)
out of range is nulled, as if not reported, and counted in :class:`DecodeNotes`. JSON nested too deeply
for the parser is malformed, never a RecursionError.

Compatibility rules: unknown fields are ignored (and counted in :class:`DecodeNotes`); a frame type this
side does not know, of the same major version, is an :class:`IgnoredFrame` (the receiver skips it and keeps
the stream: a rolling upgrade mixes agent versions); missing optional fields become None; a frame with an
unknown *major* version is a :class:`ProtocolVersionError`; a newer *minor* version is accepted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import Any, Final

from gpufleet.agent.frames import (
    EVENT_KINDS,
    FRAME_PROTO,
    GPU_FAULTS,
    PROTO_MAJOR,
    PROTO_MINOR,
    PROTO_VERSION,
    Delta,
    Event,
    EventKind,
    Frame,
    FrameType,
    GpuChange,
    GpuInfo,
    GpuSample,
    Heartbeat,
    Hello,
    MigInstance,
    ProcessSample,
    SlurmAllocation,
    Snapshot,
)

#: The frames (agent/frames.py) are read through this module too (``wire.GpuSample``): one import for the
#: format and its model.
__all__ = [
    "Delta",
    "EVENT_KINDS",
    "Event",
    "EventKind",
    "FRAME_PROTO",
    "Frame",
    "FrameType",
    "GPU_FAULTS",
    "GpuChange",
    "GpuInfo",
    "GpuSample",
    "Heartbeat",
    "Hello",
    "MigInstance",
    "PROTO_MAJOR",
    "PROTO_MINOR",
    "PROTO_VERSION",
    "ProcessSample",
    "SlurmAllocation",
    "Snapshot",
]

#: Default bound on one line (bytes, newline included). Larger lines close the stream.
MAX_LINE_BYTES: Final = 1 << 20


#: Xid codes that mean the GPU or its context is broken. To 120: the operators' tools. Past 120, NVIDIA's Xid
#: catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) gives these an immediate action of
#: resetting the GPU or restarting the machine: 140 unrecovered ECC error, 143 GPU initialization failure,
#: 158 GPU fatal timeout, 167 PCIe fatal timeout, 169 internal micro-controller halt (as 62), 173 C2C fatal
#: link failure (cross-checked with leptonai/gpud's table, pkg/nvidia-query/xid).
CRITICAL_XIDS: Final = frozenset({48, 62, 64, 74, 79, 95, 119, 120, 140, 143, 158, 167, 169, 173})
#: Warnings: 94 contained ECC error; 121 corrected C2C link errors; 154 the GPU recovery action changed (the
#: snapshot's ``recovery_action`` says which); 155 NVLink software-defined error, 156 resource retirement,
#: 163 power smoothing disengaged, 172 SRAM/DRAM detail of an Xid 48 (a reboot when convenient).
WARNING_XIDS: Final = frozenset({94, 121, 154, 155, 156, 163, 172})


class WireError(Exception):
    """Base of every protocol error; ``str()`` says what was wrong and where."""


class FrameTooLarge(WireError):
    """A line exceeded the size bound."""


class MalformedFrame(WireError):
    """Not JSON, not an object, or a field of the wrong type."""


class ProtocolVersionError(WireError):
    """The frame speaks a major protocol version this side does not know."""


class IgnoredFrame(WireError):
    """A frame type this side does not know, of its own major version (a newer agent during a rolling
    upgrade): the receiver skips it, counts it, and keeps the stream."""

    def __init__(self, kind: str, proto: str) -> None:
        super().__init__(f"unknown frame type {kind!r} (protocol {proto}) ignored")
        self.kind = kind


@dataclass(slots=True)
class DecodeNotes:
    """What :func:`decode` accepted but changed: the receiver counts these per host.

    A reading outside its plausible range (a negative ECC count, a 400 C temperature, memory beyond 2**53
    bytes) is nulled, as if the GPU had not reported it, rather than losing the whole sample.
    """

    out_of_range: int = 0
    last: str | None = None  # the last change: "snapshot.gpus[0]: ecc_uncorrected=-1 outside 0..(2**53)"
    unknown_fields: int = 0  # fields this side does not know (a newer minor version), ignored
    last_unknown: str | None = None  # the last one, "snapshot.gpus[0].future_field"

    def unknown(self, where: str, keys: set[str]) -> None:
        self.unknown_fields += len(keys)
        self.last_unknown = f"{where}.{min(keys)[:60]}"

    def nulled(self, where: str, key: str, value: object, lo: float, hi: float) -> None:
        self.out_of_range += 1
        self.last = f"{where}: {key}={str(value)[:40]} outside {_bound(lo)}..{_bound(hi)}"


def _bound(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


# Plausible ranges. Identity fields (index, pid, uid, seq...) out of range make the frame malformed;
# readings out of range are nulled (DecodeNotes). 2**53: the largest count a float (and JSON elsewhere) keeps.
U53: Final = 1 << 53
U63: Final = (1 << 63) - 1  # SQLite's INTEGER
PID_MAX: Final = (1 << 31) - 1
READ_ERRORS_MAX: Final = 64  # fields a GPU may name in ``read_errors``
SHORT_TEXT_MAX: Final = 100  # characters of a field name or an NVML error name there
UID_MAX: Final = (1 << 32) - 1
INDEX_MAX: Final = 65535
TEMP_RANGE: Final = (-60, 200)  # Celsius
POWER_MAX: Final = 100_000.0  # watts
CLOCK_MAX: Final = 100_000  # MHz



_FRAME_TYPES: Final[dict[str, type]] = {"hello": Hello, "snapshot": Snapshot, "delta": Delta, "event": Event,
                                       "heartbeat": Heartbeat}
#: Field names each object may carry; anything else is a newer minor version's, ignored and counted.
_KNOWN: Final[dict[type, frozenset[str]]] = {
    cls: frozenset(f.name for f in fields(cls))
    for cls in (Hello, Snapshot, Delta, Event, Heartbeat, GpuSample, GpuInfo, ProcessSample, MigInstance,
                SlurmAllocation)
}


# -------------------------------------------------------------------------------------------- encode


#: List fields whose empty value is their default, so they can be left out. Others (throttle_reasons)
#: keep ``[]``, which means "none" where a missing field means "not supported".
_EMPTY_BY_DEFAULT: Final = frozenset({"gpus", "processes", "mig_instances", "allocations"})


def _prune(value: Any) -> Any:
    """Drop None values and default-empty lists so frames stay small (decode restores the defaults)."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items()
                if v is not None and not (v == [] and k in _EMPTY_BY_DEFAULT)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def encode_reference(frame: Frame) -> bytes:
    """:func:`encode` by the definition (asdict, then prune): the output :func:`encode` must match byte for
    byte (tests), and what it falls back to for a frame holding something other than the model's types."""
    body = _prune(asdict(frame))
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"


#: Per wire type: its field names, a getter of all their values at once, and which of them are lists of
#: model objects. Built once so :func:`encode` reads each object without asdict's deep copy.
_Plan = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[str, ...]]


def _plan(cls: type) -> _Plan:
    names = tuple(f.name for f in fields(cls))
    return names, attrgetter(*names), tuple(n for n in names if n in _EMPTY_BY_DEFAULT)


_PLANS: Final[dict[type, _Plan]] = {
    cls: _plan(cls)
    for cls in (Hello, Snapshot, Event, Heartbeat, GpuSample, GpuInfo, ProcessSample, MigInstance,
                SlurmAllocation)
}


def _plain(obj: Any) -> dict[str, Any]:
    """``obj`` as :func:`encode_reference` writes it: None values and empty default lists left out."""
    names, values, nested = _PLANS[type(obj)]
    body = {k: v for k, v in zip(names, values(obj), strict=True) if v is not None}
    for key in nested:
        items = body.get(key)
        if items is None:
            continue
        if items == []:
            del body[key]
        else:
            body[key] = [_plain(item) for item in items]
    return body


def encode(frame: Frame) -> bytes:
    """One frame as one compact JSON line (newline included). Same bytes as :func:`encode_reference`, about
    6x faster: the agent encodes a snapshot of every GPU and process each interval."""
    try:
        body = _plain(frame)
    except KeyError:  # an object of another type somewhere (a test's stand-in): the definition decides
        return encode_reference(frame)
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"


# -------------------------------------------------------------------------------------------- decode


def _check_proto(obj: dict[str, Any]) -> None:
    proto = obj.get("proto")
    if not isinstance(proto, str):
        raise MalformedFrame("missing or non-string 'proto' field")
    major_s, _, _minor = proto.partition(".")
    try:
        major = int(major_s)
    except ValueError:
        raise MalformedFrame(f"bad 'proto' value {proto!r}") from None
    if major != PROTO_MAJOR:
        raise ProtocolVersionError(
            f"agent speaks protocol {proto}, this side speaks {PROTO_VERSION} (major versions differ)"
        )


def _typed(obj: dict[str, Any], key: str, kinds: tuple[type, ...], where: str, required: bool = False) -> Any:
    value = obj.get(key)
    if value is None:
        if required:
            raise MalformedFrame(f"{where}: missing required field {key!r}")
        return None
    if type(value) is str and kinds is _STR:  # the common cases first, without the general checks
        return value if value.isascii() and value.isprintable() else safe_text(value)
    if type(value) is int and int in kinds:
        return value
    # bool is an int subclass: never accept it where a number is wanted
    if isinstance(value, bool) and bool not in kinds:
        raise MalformedFrame(f"{where}: field {key!r} must be {_names(kinds)}, got bool")
    if not isinstance(value, kinds):
        raise MalformedFrame(f"{where}: field {key!r} must be {_names(kinds)}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise MalformedFrame(f"{where}: field {key!r} is not finite")
    if isinstance(value, str):
        return safe_text(value)
    return value


#: What no string from an agent may carry past decode: C0 controls but tab, DEL, C1 controls (terminal escape
#: sequences on the status screen, "embedded null byte" in a notifier's argv) and lone surrogates (valid
#: JSON, but not encodable as UTF-8: SQLite, /metrics and the CLI's stdout all refuse them).
_UNSAFE_TEXT: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def safe_text(value: str) -> str:
    """``value`` with every unsafe character replaced by U+FFFD, so it can be stored, shown and sent."""
    if value.isprintable() and value.isascii():
        return value  # the common case, without a regex pass
    return _UNSAFE_TEXT.sub("\ufffd", value)


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


def _ident(obj: dict[str, Any], key: str, where: str, hi: int, required: bool = False, lo: int = 0) -> Any:
    """An integer that identifies something (index, pid, seq): out of ``lo..hi`` the frame is malformed."""
    value = obj.get(key)
    if type(value) is int and lo <= value <= hi:
        return value  # the common case, without the general checks
    value = _typed(obj, key, _INT, where, required)
    if value is not None and not lo <= value <= hi:
        raise MalformedFrame(
            f"{where}: field {key!r} = {str(value)[:40]} is outside {_bound(lo)}..{_bound(hi)}")
    return value


def _reading(obj: dict[str, Any], key: str, kinds: tuple[type, ...], where: str, notes: DecodeNotes,
             lo: float, hi: float) -> Any:
    """A measurement: out of ``lo..hi`` it is nulled ("not reported") and noted."""
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is int and lo <= value <= hi:
        return value  # the common case, without the general checks
    value = _typed(obj, key, kinds, where)
    if value is not None and not lo <= value <= hi:
        notes.nulled(where, key, value, lo, hi)
        return None
    return value


_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_BOOL = (bool,)


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedFrame(f"{where}: field {key!r} must be a list")
    return value


def _obj(value: Any, where: str, known: frozenset[str] | None = None,
         notes: DecodeNotes | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedFrame(f"{where}: must be an object")
    if known is not None and notes is not None:
        extra = value.keys() - known
        if extra:
            notes.unknown(where, extra)
    return value


def _process(raw: Any, where: str, notes: DecodeNotes) -> ProcessSample:
    o = _obj(raw, where, _KNOWN[ProcessSample], notes)
    attributed = _typed(o, "attributed", _BOOL, where)
    return ProcessSample(
        pid=_ident(o, "pid", where, PID_MAX, required=True),
        kind=_typed(o, "kind", _STR, where) or "compute",
        gpu_memory=_reading(o, "gpu_memory", _INT, where, notes, 0, U53),
        sm_util=_pct(_typed(o, "sm_util", _INT, where)),
        mem_util=_pct(_typed(o, "mem_util", _INT, where)),
        user=_typed(o, "user", _STR, where),
        uid=_ident(o, "uid", where, UID_MAX),
        command=_typed(o, "command", _STR, where),
        start_time=_float(_reading(o, "start_time", _NUM, where, notes, 0, U53)),
        state=_typed(o, "state", _STR, where),
        ppid=_ident(o, "ppid", where, PID_MAX),
        container=_typed(o, "container", _STR, where),
        pod=_typed(o, "pod", _STR, where),
        job=_typed(o, "job", _STR, where),
        attributed=True if attributed is None else attributed,
        job_name=_typed(o, "job_name", _STR, where),
        job_user=_typed(o, "job_user", _STR, where),
        job_account=_typed(o, "job_account", _STR, where),
        job_partition=_typed(o, "job_partition", _STR, where),
        job_state=_typed(o, "job_state", _STR, where),
        gi_id=_ident(o, "gi_id", where, INDEX_MAX),
        ci_id=_ident(o, "ci_id", where, INDEX_MAX),
        pod_namespace=_typed(o, "pod_namespace", _STR, where),
        pod_name=_typed(o, "pod_name", _STR, where),
        container_name=_typed(o, "container_name", _STR, where),
    )


def _allocation(raw: Any, where: str, notes: DecodeNotes) -> SlurmAllocation:
    o = _obj(raw, where, _KNOWN[SlurmAllocation], notes)
    indexes = o.get("gpu_indexes")
    if not isinstance(indexes, list) or not all(type(i) is int and 0 <= i <= INDEX_MAX for i in indexes):
        raise MalformedFrame(f"{where}: field 'gpu_indexes' must be a list of GPU indexes 0..{INDEX_MAX}")
    return SlurmAllocation(
        job=_typed(o, "job", _STR, where, required=True),
        gpu_indexes=list(indexes),
        name=_typed(o, "name", _STR, where),
        user=_typed(o, "user", _STR, where),
        account=_typed(o, "account", _STR, where),
        partition=_typed(o, "partition", _STR, where),
        state=_typed(o, "state", _STR, where),
    )


def _float(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def _mig(raw: Any, where: str, notes: DecodeNotes) -> MigInstance:
    o = _obj(raw, where, _KNOWN[MigInstance], notes)
    return MigInstance(
        gi_id=_ident(o, "gi_id", where, INDEX_MAX, required=True),
        ci_id=_ident(o, "ci_id", where, INDEX_MAX),
        uuid=_typed(o, "uuid", _STR, where),
        profile=_typed(o, "profile", _STR, where),
        memory_total=_reading(o, "memory_total", _INT, where, notes, 0, U53),
        memory_used=_reading(o, "memory_used", _INT, where, notes, 0, U53),
        sm_active=_pct(_typed(o, "sm_active", _INT, where)),
    )


def _read_errors(o: dict[str, Any], where: str) -> dict[str, str] | None:
    """``read_errors``: an object of short strings, at most READ_ERRORS_MAX of them (else malformed)."""
    value = o.get("read_errors")
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > READ_ERRORS_MAX or not all(
            isinstance(k, str) and isinstance(v, str) and max(len(k), len(v)) <= SHORT_TEXT_MAX
            for k, v in value.items()):
        raise MalformedFrame(f"{where}: field 'read_errors' must be an object of at most {READ_ERRORS_MAX} "
                             f"short strings")
    return {safe_text(k): safe_text(v) for k, v in value.items()}


def _gpu_sample(raw: Any, where: str, notes: DecodeNotes) -> GpuSample:
    o = _obj(raw, where, _KNOWN[GpuSample], notes)
    reasons = o.get("throttle_reasons")
    if reasons is not None and not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)):
        raise MalformedFrame(f"{where}: field 'throttle_reasons' must be a list of strings")
    if reasons is not None:
        reasons = [safe_text(r) for r in reasons]
    t_lo, t_hi = TEMP_RANGE
    return GpuSample(
        index=_ident(o, "index", where, INDEX_MAX, required=True),
        uuid=_typed(o, "uuid", _STR, where, required=True),
        name=_typed(o, "name", _STR, where),
        serial=_typed(o, "serial", _STR, where),
        pci_bus_id=_typed(o, "pci_bus_id", _STR, where),
        util_gpu=_pct(_typed(o, "util_gpu", _INT, where)),
        util_mem=_pct(_typed(o, "util_mem", _INT, where)),
        memory_total=_reading(o, "memory_total", _INT, where, notes, 0, U53),
        memory_used=_reading(o, "memory_used", _INT, where, notes, 0, U53),
        memory_reserved=_reading(o, "memory_reserved", _INT, where, notes, 0, U53),
        temperature=_reading(o, "temperature", _INT, where, notes, t_lo, t_hi),
        temp_slowdown=_reading(o, "temp_slowdown", _INT, where, notes, t_lo, t_hi),
        temp_shutdown=_reading(o, "temp_shutdown", _INT, where, notes, t_lo, t_hi),
        power_draw=_float(_reading(o, "power_draw", _NUM, where, notes, 0, POWER_MAX)),
        power_limit=_float(_reading(o, "power_limit", _NUM, where, notes, 0, POWER_MAX)),
        clock_sm=_reading(o, "clock_sm", _INT, where, notes, 0, CLOCK_MAX),
        clock_mem=_reading(o, "clock_mem", _INT, where, notes, 0, CLOCK_MAX),
        throttle_reasons=reasons,
        fan_speed=_reading(o, "fan_speed", _INT, where, notes, 0, 1000),
        ecc_corrected=_reading(o, "ecc_corrected", _INT, where, notes, 0, U53),
        ecc_uncorrected=_reading(o, "ecc_uncorrected", _INT, where, notes, 0, U53),
        mig_mode=_typed(o, "mig_mode", _BOOL, where),
        mig_instances=[_mig(m, f"{where}.mig_instances[{i}]", notes)
                       for i, m in enumerate(_list(o, "mig_instances", where))],
        processes=[_process(p, f"{where}.processes[{i}]", notes)
                   for i, p in enumerate(_list(o, "processes", where))],
        error=_typed(o, "error", _STR, where),
        sm_active=_pct(_typed(o, "sm_active", _INT, where)),
        fault=_typed(o, "fault", _STR, where),
        read_errors=_read_errors(o, where),
        processes_error=_typed(o, "processes_error", _STR, where),
        tensor_active=_pct(_typed(o, "tensor_active", _INT, where)),
        dram_active=_pct(_typed(o, "dram_active", _INT, where)),
        gr_active=_pct(_typed(o, "gr_active", _INT, where)),
        memory_temperature=_reading(o, "memory_temperature", _INT, where, notes, t_lo, t_hi),
        energy_mj=_reading(o, "energy_mj", _INT, where, notes, 0, U53),
        recovery_action=_typed(o, "recovery_action", _STR, where),
        remapped_correctable=_reading(o, "remapped_correctable", _INT, where, notes, 0, U53),
        remapped_uncorrectable=_reading(o, "remapped_uncorrectable", _INT, where, notes, 0, U53),
        remap_pending=_typed(o, "remap_pending", _BOOL, where),
        remap_failed=_typed(o, "remap_failed", _BOOL, where),
    )


def _pct(value: int | None) -> int | None:
    return None if value is None else max(0, min(100, value))


def _gpu_info(raw: Any, where: str, notes: DecodeNotes) -> GpuInfo:
    o = _obj(raw, where, _KNOWN[GpuInfo], notes)
    t_lo, t_hi = TEMP_RANGE
    return GpuInfo(
        index=_ident(o, "index", where, INDEX_MAX, required=True),
        uuid=_typed(o, "uuid", _STR, where, required=True),
        name=_typed(o, "name", _STR, where),
        serial=_typed(o, "serial", _STR, where),
        pci_bus_id=_typed(o, "pci_bus_id", _STR, where),
        memory_total=_reading(o, "memory_total", _INT, where, notes, 0, U53),
        power_limit=_float(_reading(o, "power_limit", _NUM, where, notes, 0, POWER_MAX)),
        temp_slowdown=_reading(o, "temp_slowdown", _INT, where, notes, t_lo, t_hi),
        temp_shutdown=_reading(o, "temp_shutdown", _INT, where, notes, t_lo, t_hi),
        mig_mode=_typed(o, "mig_mode", _BOOL, where),
    )


def _ts(obj: dict[str, Any], where: str) -> float:
    """A frame's time: finite (the receiver bounds it by its own clock). An int too large for a float (JSON
    allows 4300 digits) is malformed, not an OverflowError."""
    value = _typed(obj, "ts", _NUM, where, required=True)
    try:
        return float(value)
    except OverflowError:
        raise MalformedFrame(f"{where}: field 'ts' = {str(value)[:40]}... is not a finite time") from None


def from_object(obj: Any, notes: DecodeNotes | None = None) -> Frame:
    """Validate a decoded JSON value and build the frame. Raises :class:`WireError` subclasses."""
    n = notes if notes is not None else DecodeNotes()
    o = _obj(obj, "frame")
    _check_proto(o)
    kind = o.get("type")
    cls = _FRAME_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        if isinstance(kind, str) and kind:
            raise IgnoredFrame(safe_text(kind[:60]), safe_text(str(o["proto"])[:20]))
        raise MalformedFrame(f"bad frame type {kind!r}"[:100])
    _obj(o, str(kind), _KNOWN[cls], n)
    proto = safe_text(o["proto"][:20])  # the agent's own version (checked above), not this side's
    if kind == "snapshot":
        return Snapshot(
            proto=proto,
            ts=_ts(o, "snapshot"),
            seq=_ident(o, "seq", "snapshot", U63) or 0,
            gpus=[_gpu_sample(g, f"snapshot.gpus[{i}]", n)
                  for i, g in enumerate(_list(o, "gpus", "snapshot"))],
            allocations=[_allocation(a, f"snapshot.allocations[{i}]", n)
                         for i, a in enumerate(_list(o, "allocations", "snapshot"))],
        )
    if kind == "delta":
        from gpufleet.agent.delta import delta_from_object  # the module that owns the delta format

        return delta_from_object(o, proto, n)
    if kind == "heartbeat":
        return Heartbeat(proto=proto, ts=_ts(o, "heartbeat"), seq=_ident(o, "seq", "heartbeat", U63) or 0)
    if kind == "event":
        return Event(
            proto=proto,
            ts=_ts(o, "event"),
            kind=_typed(o, "kind", _STR, "event", required=True),
            message=_typed(o, "message", _STR, "event") or "",
            gpu_index=_ident(o, "gpu_index", "event", INDEX_MAX),
            uuid=_typed(o, "uuid", _STR, "event"),
            xid=_ident(o, "xid", "event", PID_MAX),
        )
    if kind == "hello":
        return Hello(
            proto=proto,
            agent_version=_typed(o, "agent_version", _STR, "hello", required=True),
            hostname=_typed(o, "hostname", _STR, "hello") or "",
            ts=_ts(o, "hello"),
            driver_version=_typed(o, "driver_version", _STR, "hello"),
            nvml_version=_typed(o, "nvml_version", _STR, "hello"),
            cuda_version=_ident(o, "cuda_version", "hello", PID_MAX),
            backend=_typed(o, "backend", _STR, "hello") or "nvml",
            pid_namespace_ok=_typed(o, "pid_namespace_ok", _BOOL, "hello"),
            delta=_typed(o, "delta", _BOOL, "hello"),
            gpus=[_gpu_info(g, f"hello.gpus[{i}]", n) for i, g in enumerate(_list(o, "gpus", "hello"))],
        )
    raise MalformedFrame(f"unknown frame type {kind!r}")


def decode(line: bytes | str, max_bytes: int = MAX_LINE_BYTES, notes: DecodeNotes | None = None) -> Frame:
    """Parse and validate one line. Size is checked before parsing so a huge line costs nothing.
    ``notes`` (optional) learns what was accepted but changed (readings out of range, nulled)."""
    size = len(line) if isinstance(line, bytes) else len(line.encode())
    if size > max_bytes:
        raise FrameTooLarge(f"line of {size} bytes exceeds the {max_bytes}-byte bound")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:  # ints over 4300 digits are a ValueError too
        raise MalformedFrame(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedFrame("not valid JSON: nested too deeply") from None
    return from_object(obj, notes)
