"""Protocol 1.3: send what changed, not the whole host every second (issue 33).

A full snapshot repeats every second what changes every hour: each GPU's name, serial, PCI id, UUID, limits
and thresholds, and each process's user, command, start time, container, job and Slurm names. A ``delta``
frame carries a sample as what changed since the frame before it; the collector keeps the picture it
applies to (collector/transport/delta.py) and hands the rest of the collector whole snapshots, as before.

Negotiation. The agent's hello says ``"delta": true`` when it can send deltas (it watches its stdin). It
sends full snapshots until the collector writes :data:`ACCEPT` on the agent's stdin; then a full snapshot
(the *keyframe*, the base of what follows) and deltas. Why stdin and not an argument or an environment
variable: a forced command in authorized_keys fixes the agent's argv (the collector's request is ignored),
sshd passes no environment without AcceptEnv (off by default, and sudo drops it), while the stdin pipe is
there on every path (SSH, forced commands, sudo, jump hosts, the local transport): the collector already
holds it to send EOF. An older agent reads nothing on stdin but EOF, so the collector may write to it
harmlessly; an older collector writes nothing, so a 1.3 agent keeps sending full frames (whose format is
1.2's, wire.FRAME_PROTO) to it. :data:`RESYNC` asks for a keyframe (the collector lost its base).

A delta (``{"type": "delta", "proto": "1.3", "ts", "seq", "base", "gpus", "allocations"}``):
- ``base`` is the seq of the frame it applies to (the last snapshot or delta sent); a receiver without that
  frame drops it and asks for a resync.
- ``gpus`` lists each GPU whose sample changed, by ``index``; a GPU not listed is as it was. Which GPUs
  there are, and their constants (:data:`GPU_CONSTANTS`), are the base's: when either changes the agent
  sends a keyframe instead (the "inventory frame"). A listed GPU carries every reading it has now, as in a
  snapshot (a reading absent is not reported), and its process changes:
  ``pids`` the pids on it in order, when that list changed (the processes not in it left); ``changed`` the
  whole record of each process that is new or changed in anything but its utilization; ``util``
  ``[pid, sm_util, mem_util]`` of each process whose utilization alone changed.
- ``allocations`` (the Slurm jobs holding GPUs here) when they changed; absent: as before.
Keyframes also go out every :data:`KEYFRAME_EVERY` seconds, so any drift is bounded, and whenever a delta
cannot say it (a pid twice on one GPU: MIG instances of one GPU; a line over the bound).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Final

from gpufleet.agent import wire
from gpufleet.agent.wire import (
    PID_MAX,
    U63,
    DecodeNotes,
    Delta,
    GpuChange,
    GpuSample,
    MalformedFrame,
    ProcessSample,
    Snapshot,
)

#: What a GPU's sample carries that changes only with the hardware or its configuration: sent in hello and
#: in full snapshots, never in a delta (a change means a keyframe).
GPU_CONSTANTS: Final = ("uuid", "name", "serial", "pci_bus_id", "memory_total", "power_limit",
                        "temp_slowdown", "temp_shutdown", "mig_mode")
#: A process's readings that change sample to sample: a change of these alone travels in ``util``.
PROCESS_UTIL: Final = ("sm_util", "mem_util")
#: Seconds between two keyframes while deltas flow: a resync every few minutes bounds any drift.
KEYFRAME_EVERY: Final = 300.0

#: The collector's lines on the agent's stdin (one JSON object a line).
ACCEPT: Final = json.dumps({"type": "accept", "proto": wire.PROTO_VERSION, "delta": True},
                           separators=(",", ":")).encode() + b"\n"
RESYNC: Final = json.dumps({"type": "resync", "proto": wire.PROTO_VERSION},
                           separators=(",", ":")).encode() + b"\n"
#: A control line longer than this is not one of ours: skipped.
CONTROL_MAX: Final = 4096

_DELTA_KEYS: Final = frozenset({"pids", "changed", "util"})
#: The GpuSample fields a delta's GPU carries (its readings), and every key it may have.
READINGS: Final = frozenset(f for f in wire._KNOWN[GpuSample] if f not in GPU_CONSTANTS and f != "processes")
_GPU_KNOWN: Final = READINGS | _DELTA_KEYS


def parse_control(line: bytes) -> str | None:
    """"accept" or "resync" for one of the collector's lines; None for anything else (ignored)."""
    if len(line) > CONTROL_MAX:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    kind = obj.get("type")
    if kind == "accept" and obj.get("delta") is True:
        return "accept"
    if kind == "resync":
        return "resync"
    return None


# ------------------------------------------------------------------------------------------- encoding


_PROCESS_FIELDS: Final = tuple(f.name for f in fields(ProcessSample))
#: a process's record but its utilization, and its utilization, each as one tuple (attrgetter: in C)
_IDENTITY: Final = attrgetter(*(f for f in _PROCESS_FIELDS if f not in PROCESS_UTIL))
_UTIL: Final = attrgetter(*PROCESS_UTIL)
_READING_NAMES: Final = tuple(f.name for f in fields(GpuSample) if f.name in READINGS)
_READING_VALUES: Final = attrgetter(*_READING_NAMES)
_CONSTANTS: Final = attrgetter(*GPU_CONSTANTS)


@dataclass(slots=True)
class _GpuBase:
    """One GPU as the last frame sent it: what the next delta is worked out against."""

    index: int
    consts: tuple[Any, ...]
    readings: dict[str, Any]  # every reading sent (no constants, no processes), "index" included
    procs: dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]]  # pid -> (its record but util, its util)
    order: list[int]
    processes: list[ProcessSample]


def _gpu_base(g: GpuSample) -> _GpuBase | None:
    """``g`` taken apart as a delta compares it; None when a delta could not describe it (a pid listed twice:
    the processes of two MIG instances of one GPU)."""
    readings = {k: v for k, v in zip(_READING_NAMES, _READING_VALUES(g), strict=True) if v is not None}
    mig = readings.pop("mig_instances", None)
    if mig:  # as wire.encode writes it: objects as their fields, an empty list left out
        readings["mig_instances"] = [wire._plain(m) for m in mig]
    procs = {p.pid: (_IDENTITY(p), _UTIL(p)) for p in g.processes}
    if len(procs) != len(g.processes):
        return None
    return _GpuBase(g.index, _CONSTANTS(g), readings, procs, [p.pid for p in g.processes], g.processes)


def _gpu_change(new: _GpuBase, old: _GpuBase) -> dict[str, Any] | None:
    """The delta entry of a GPU (None: nothing changed)."""
    changed: list[dict[str, Any]] = []
    util: list[list[Any]] = []
    before = old.procs
    now = new.procs
    for p in new.processes:
        ident, u = now[p.pid]
        prev = before.get(p.pid)
        if prev is None or prev[0] != ident:
            changed.append(wire._plain(p))
        elif prev[1] != u:
            util.append([p.pid, *u])
    moved = new.order != old.order
    if not (changed or util or moved) and new.readings == old.readings:
        return None
    entry = dict(new.readings)
    if moved:
        entry["pids"] = new.order
    if changed:
        entry["changed"] = changed
    if util:
        entry["util"] = util
    return entry


class DeltaEncoder:
    """Encodes the agent's snapshots: full frames until :meth:`accept`, then a keyframe and deltas.

    The sampling thread calls :meth:`encode`; the stdin thread calls :meth:`accept` and :meth:`resync`
    (they only set flags the next :meth:`encode` reads). A process's record is compared as a tuple of its
    fields, and encoded only when it changed."""

    def __init__(self, keyframe_every: float = KEYFRAME_EVERY, clock: Callable[[], float] = time.monotonic,
                 max_line_bytes: int = wire.MAX_LINE_BYTES) -> None:
        self.keyframe_every = keyframe_every
        self.clock = clock
        self.max_line_bytes = max_line_bytes
        self.accepted = False
        self._want_key = True
        self._base: list[_GpuBase] | None = None
        self._allocations: list[Any] = []
        self._seq = 0
        self._key_at = float("-inf")
        self.keyframes = 0
        self.deltas = 0

    def accept(self) -> None:
        """The collector takes deltas: the next frame is a keyframe."""
        self._want_key = True
        self.accepted = True

    def resync(self) -> None:
        """The collector lost its base: the next frame is a keyframe."""
        self._want_key = True

    def encode(self, snapshot: Snapshot) -> bytes:
        """The line to send for ``snapshot``."""
        if not self.accepted:
            return wire.encode(snapshot)
        now = self.clock()
        if not self._want_key and self._base is not None and now - self._key_at < self.keyframe_every:
            line = self._delta(snapshot)
            if line is not None and len(line) <= self.max_line_bytes:
                self.deltas += 1
                return line
        return self._keyframe(snapshot, now)

    def _keyframe(self, snapshot: Snapshot, now: float) -> bytes:
        line = wire.encode(snapshot)
        gpus = [_gpu_base(g) for g in snapshot.gpus]
        self._base = None if any(g is None for g in gpus) else [g for g in gpus if g is not None]
        self._allocations = [wire._plain(a) for a in snapshot.allocations]
        self._seq = snapshot.seq
        self._want_key, self._key_at = False, now
        self.keyframes += 1
        return line

    def _delta(self, snapshot: Snapshot) -> bytes | None:
        """The delta line, or None when only a keyframe can say what changed."""
        base = self._base
        assert base is not None
        if len(snapshot.gpus) != len(base):
            return None
        entries = []
        news = []
        for g, old in zip(snapshot.gpus, base, strict=True):
            new = _gpu_base(g)
            if new is None or new.index != old.index or new.consts != old.consts:
                return None
            news.append(new)
            entry = _gpu_change(new, old)
            if entry is not None:
                entries.append(entry)
        out: dict[str, Any] = {"ts": snapshot.ts, "seq": snapshot.seq, "base": self._seq}
        if entries:
            out["gpus"] = entries
        allocations = [wire._plain(a) for a in snapshot.allocations]
        if allocations != self._allocations:
            out["allocations"] = allocations
        out["type"], out["proto"] = "delta", wire.PROTO_VERSION
        self._base, self._allocations, self._seq = news, allocations, snapshot.seq
        return json.dumps(out, separators=(",", ":"), allow_nan=False).encode() + b"\n"


# ------------------------------------------------------------------------------------------- decoding


def _pids(o: dict[str, Any], where: str) -> list[int] | None:
    value = o.get("pids")
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(p) is int and 0 <= p <= PID_MAX for p in value):
        raise MalformedFrame(f"{where}: field 'pids' must be a list of pids 0..{PID_MAX}")
    return list(value)


def _util(o: dict[str, Any], where: str) -> list[tuple[int, int | None, int | None]]:
    out: list[tuple[int, int | None, int | None]] = []
    for i, entry in enumerate(wire._list(o, "util", where)):
        if not (isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is int
                and 0 <= entry[0] <= PID_MAX and all(v is None or type(v) is int for v in entry[1:])):
            raise MalformedFrame(f"{where}.util[{i}]: must be [pid, sm_util or null, mem_util or null]")
        out.append((entry[0], wire._pct(entry[1]), wire._pct(entry[2])))
    return out


def _gpu(raw: Any, where: str, notes: DecodeNotes) -> GpuChange:
    o = wire._obj(raw, where, _GPU_KNOWN, notes)
    readings = {k: v for k, v in o.items() if k in READINGS}
    readings["uuid"] = ""  # the receiver's base has it
    return GpuChange(
        sample=wire._gpu_sample(readings, where, notes),
        pids=_pids(o, where),
        changed=[wire._process(p, f"{where}.changed[{i}]", notes)
                 for i, p in enumerate(wire._list(o, "changed", where))],
        util=_util(o, where),
    )


def delta_from_object(o: dict[str, Any], proto: str, notes: DecodeNotes) -> Delta:
    """The reference decoder of a delta frame (wire.from_object has checked its proto and top-level keys)."""
    allocations = o.get("allocations")
    return Delta(
        proto=proto,
        ts=wire._ts(o, "delta"),
        seq=wire._ident(o, "seq", "delta", U63) or 0,
        base=wire._ident(o, "base", "delta", U63, required=True),
        gpus=[_gpu(g, f"delta.gpus[{i}]", notes) for i, g in enumerate(wire._list(o, "gpus", "delta"))],
        allocations=None if allocations is None else [
            wire._allocation(a, f"delta.allocations[{i}]", notes)
            for i, a in enumerate(wire._list(o, "allocations", "delta"))],
    )
