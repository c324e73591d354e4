"""What the store refuses to write, whatever path a frame came by: the one check at the writer's entry.

The stream edge bounds what an agent sends (the decoder checks every number's range; transport/stream.py
bounds a frame's time by its receive time), but frames reach the store by other paths too: the simulator,
tests, and the coming chunk store and its migration. So :meth:`Writer.put <.writer.Writer.put>`, the
store's single write entry, asks :func:`refusal` of every frame and host record, and drops (counts, logs)
what it refuses:

- a time outside ``[clock - MAX_AGE, clock + MAX_CLOCK_AHEAD]`` (the store's own clock): older than any
  retention can keep, or further ahead than the stream ever lets a frame be. One frame ten years ahead would
  otherwise move a process's last-seen ten years forward, and ts=-1e300 broke every later maintenance.
  That is a frame's ``ts``, its receive time and a host record's times; a process's start time gets one
  MAX_CLOCK_AHEAD more (the stream lets a start lie that far after the sample that shows it).
- a number the store writes or reckons with (``STORED``: a sample's readings, a process's identity, memory
  and SM share; not the thresholds or MIG figures it never reads) that is not finite, lies outside the sample
  model's range, or is no number at all. The ranges are the annotations of collector/sample.py (the decoder
  enforces the same: one owner for "plausible"), checked by msgspec in C over a numbers-only twin of the
  model (tests/bench/admit_bench.py: ~0.02 ms for 8 GPUs x 8 processes, half a decode).

A refused frame is dropped whole: a snapshot with one impossible reading is not a sample to average.

Per change (issue 33): a GPU's process list that the writer took with the host's previous snapshot (the
stream's edge keeps it one object while the processes stay the same, collector/transport/delta.py) was
checked then; only its utilization changes in place, and that comes from the decoder's checked values. So
the processes of a list already taken are not checked again (``taken``: (host, GPU index) -> the list).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Final

import msgspec
from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.settings import MAX_CLOCK_AHEAD
from gpufleet.collector.store.ingest import FrameItem
from gpufleet.collector.units import MAX_DURATION, MAX_DURATION_TEXT

#: The oldest time the store writes, back from its clock: the longest retention any config may set.
MAX_AGE: Final = MAX_DURATION
WINDOW_TEXT: Final = f"{MAX_DURATION_TEXT} back, {MAX_CLOCK_AHEAD:.0f} s ahead"


def _numbers(cls: type[msgspec.Struct], extra: list[tuple[str, Any]] | None = None,
             only: frozenset[str] | None = None) -> Any:
    """A Struct with ``cls``'s numeric fields (same annotations, so the same ranges) and ``extra`` ones:
    ``msgspec.convert(obj, twin, from_attributes=True)`` validates ``obj``'s numbers in C."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[tuple[str, Any]] = []
    for f in msgspec.inspect.type_info(cls).fields:  # type: ignore[attr-defined]
        t = f.type
        if isinstance(t, msgspec.inspect.UnionType):
            t = next((m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)), t)
        if isinstance(t, (msgspec.inspect.IntType, msgspec.inspect.FloatType)) and (only is None
                                                                                    or f.name in only):
            fields.append((f.name, hints[f.name]))
    return msgspec.defstruct(f"{cls.__name__}Numbers", fields + (extra or []))


#: The numbers the store writes (samples, gpus, processes, usage) or classifies with, per object.
STORED: Final = {
    sample.GpuSample: frozenset({"index", "util_gpu", "util_mem", "memory_total", "memory_used",
                                 "temperature", "power_draw", "power_limit", "clock_sm", "clock_mem",
                                 "fan_speed", "ecc_corrected", "ecc_uncorrected", "sm_active"}),
    sample.ProcessSample: frozenset({"pid", "gpu_memory", "sm_util", "uid", "start_time"}),
}
_PROCESS: Final = _numbers(sample.ProcessSample, only=STORED[sample.ProcessSample])
_PROCESSES: Final = list[_PROCESS]  # type: ignore[valid-type]
_GPU: Final = _numbers(sample.GpuSample, only=STORED[sample.GpuSample])  # its processes: _PROCESSES
_GPUS: Final = list[_GPU]  # type: ignore[valid-type]
#: hello's GPU facts are a subset of a sample's fields, with the same ranges
_HELLO_GPUS: Final = list[_numbers(sample.GpuSample,  # type: ignore[misc]
                                   only=frozenset(wire.GpuInfo.__dataclass_fields__))]
_EVENT: Final = (("gpu_index", wire.INDEX_MAX), ("xid", wire.PID_MAX))


def window(now: float, ahead: float = MAX_CLOCK_AHEAD) -> tuple[float, float]:
    """The times the store writes, by its clock ``now`` (module docstring); maintenance reads the same
    (with more room ``ahead`` where it judges rows already stored)."""
    return now - MAX_AGE, now + ahead


def _time(what: str, value: Any, lo: float, hi: float) -> str | None:
    try:
        if lo <= value <= hi and not isinstance(value, bool):
            return None
    except TypeError:
        pass
    return f"{what} {value!r:.40} is outside the store's window ({WINDOW_TEXT} of its clock)"


def _numbers_bad(obj: Any, twin: Any, what: str) -> str | None:
    try:
        msgspec.convert(obj, twin, from_attributes=True)
    except msgspec.ValidationError as exc:
        return f"{what}: {str(exc).replace(' - at `$', ' at `')}"
    return None


def _processes_bad(frame: sample.Snapshot, host: str, taken: Mapping[tuple[str, int], object],
                   hi: float) -> str | None:
    """The processes of the GPUs whose list was not taken before (module docstring)."""
    latest = 0.0
    for i, g in enumerate(frame.gpus):
        procs = g.processes
        if not procs or taken.get((host, g.index)) is procs:
            continue
        why = _numbers_bad(procs, _PROCESSES, "a value out of range")
        if why:
            return why.replace(" at `$[", f" at `$.gpus[{i}].processes[", 1)
        latest = max(latest, max((p.start_time for p in procs if p.start_time is not None), default=0.0))
    if latest > hi + MAX_CLOCK_AHEAD:
        return f"a process's start time {latest!r:.40} is ahead of the store's window ({WINDOW_TEXT})"
    return None


def refusal(item: FrameItem | HostRecord, now: float,
            taken: Mapping[tuple[str, int], object] | None = None) -> str | None:
    """Why the store must not write ``item`` (checked against its clock ``now``), or None. ``taken``: the
    process list the writer last took per (host, GPU index), whose processes need no second look."""
    lo, hi = window(now)
    if isinstance(item, HostRecord):
        for what, t in (("since", item.since), ("last_seen", item.last_seen)):
            if t is not None and (why := _time(f"host {what}", t, lo, hi)):
                return why
        return None
    frame = item.frame
    why = _time("time", frame.ts, lo, hi) or _time("receive time", item.received, lo, hi)
    if why:
        return why
    if isinstance(frame, sample.Snapshot):
        why = _numbers_bad(frame.gpus, _GPUS, "a value out of range")
        if why:
            return why.replace(" at `$[", " at `$.gpus[", 1)
        return _processes_bad(frame, item.host, taken or {}, hi)
    if isinstance(frame, wire.Event):
        for name, top in _EVENT:
            value = getattr(frame, name)
            if value is not None and not (type(value) is int and 0 <= value <= top):
                return f"event {name} {value!r:.40} out of range (0..{top})"
        return None
    if isinstance(frame, wire.Hello):
        cuda = frame.cuda_version
        if cuda is not None and not (type(cuda) is int and 0 <= cuda <= wire.PID_MAX):
            return f"hello cuda_version {cuda!r:.40} out of range"
        return _numbers_bad(frame.gpus, _HELLO_GPUS, "a hello GPU value out of range")
    return None
