"""The collector's sample model: one snapshot of a host, its GPUs and their processes, as msgspec Structs.

Why Structs and not the wire dataclasses: msgspec decodes a frame's bytes straight into these classes (in C,
with every range checked, :mod:`gpufleet.collector.transport.wirefast`), so the objects the live view, the
rules and the store read are the ones the decoder built. Converting a frame's 72 objects into other Python
classes cost 35-40 µs per 8-GPU x 64-process snapshot, most of what msgspec's whole parse costs. The agent
keeps the wire dataclasses (agent/wire.py, standard library only); they are the protocol, and a frame that
takes the reference decoder is converted into these classes once, at the edge (:func:`from_wire`).

The field names and defaults are the wire's (tests/test_wirefast.py checks that), and each numeric
field carries the range the reference decoder accepts unchanged, so a frame decodes to the same values on
either path. Hello and event frames are rare; the collector reads them as the wire types.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec
from gpufleet.agent import delta, wire
from msgspec import UNSET, Meta, UnsetType

#: The protocol versions whose every field this side knows (this major; this minor or an older one). A frame
#: of another version goes to the reference decoder, which counts the fields this side does not know.
KNOWN_VERSIONS: Final = tuple(f"{wire.PROTO_MAJOR}.{m}" for m in range(wire.PROTO_MINOR + 1))
_VERSION_PATTERN: Final = "^(" + "|".join(v.replace(".", r"\.") for v in KNOWN_VERSIONS) + ")$"

Percent = Annotated[int, Meta(ge=0, le=100)]
Bytes = Annotated[int, Meta(ge=0, le=wire.U53)]
Celsius = Annotated[int, Meta(ge=wire.TEMP_RANGE[0], le=wire.TEMP_RANGE[1])]
Watts = Annotated[float, Meta(ge=0, le=wire.POWER_MAX)]
MHz = Annotated[int, Meta(ge=0, le=wire.CLOCK_MAX)]
Index = Annotated[int, Meta(ge=0, le=wire.INDEX_MAX)]
Pid = Annotated[int, Meta(ge=0, le=wire.PID_MAX)]
#: strict bounds: msgspec rounds an int to a float before the check (2**53 + 1 would pass as 2**53)
Seconds = Annotated[float, Meta(gt=0, lt=wire.U53)]
Seq = Annotated[int, Meta(ge=0, le=wire.U63)]
Proto = Annotated[str, Meta(pattern=_VERSION_PATTERN)]


class _Sample(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Keyword construction only; unknown fields send a frame to the reference decoder. Not tracked by the
    cycle collector: a sample holds no cycle, and the daemon holds thousands."""


class ProcessSample(_Sample):
    """One process on one GPU (wire.ProcessSample)."""

    pid: Pid
    kind: Annotated[str, Meta(min_length=1)] = "compute"  # the reference turns "" into "compute"
    gpu_memory: Bytes | None = None
    sm_util: Percent | None = None
    mem_util: Percent | None = None
    user: str | None = None
    uid: Annotated[int, Meta(ge=0, le=wire.UID_MAX)] | None = None
    command: str | None = None
    start_time: Seconds | None = None
    state: str | None = None
    ppid: Pid | None = None
    container: str | None = None
    pod: str | None = None
    job: str | None = None
    attributed: bool = True
    job_name: str | None = None
    job_user: str | None = None
    job_account: str | None = None
    job_partition: str | None = None
    job_state: str | None = None
    gi_id: Index | None = None
    ci_id: Index | None = None
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None


class MigInstance(_Sample):
    """One MIG instance of a GPU (wire.MigInstance)."""

    gi_id: Index
    ci_id: Index | None = None
    uuid: str | None = None
    profile: str | None = None
    memory_total: Bytes | None = None
    memory_used: Bytes | None = None
    sm_active: Percent | None = None


ShortText = Annotated[str, Meta(max_length=wire.SHORT_TEXT_MAX)]


class GpuSample(_Sample):
    """One GPU's readings and its processes (wire.GpuSample)."""

    index: Index
    uuid: str
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    util_gpu: Percent | None = None
    util_mem: Percent | None = None
    memory_total: Bytes | None = None
    memory_used: Bytes | None = None
    memory_reserved: Bytes | None = None
    temperature: Celsius | None = None
    temp_slowdown: Celsius | None = None
    temp_shutdown: Celsius | None = None
    power_draw: Watts | None = None
    power_limit: Watts | None = None
    clock_sm: MHz | None = None
    clock_mem: MHz | None = None
    throttle_reasons: list[str] | None = None
    fan_speed: Annotated[int, Meta(ge=0, le=1000)] | None = None
    ecc_corrected: Bytes | None = None
    ecc_uncorrected: Bytes | None = None
    mig_mode: bool | None = None
    mig_instances: list[MigInstance] = msgspec.field(default_factory=list)
    processes: list[ProcessSample] = msgspec.field(default_factory=list)
    error: str | None = None
    sm_active: Percent | None = None
    fault: str | None = None
    read_errors: Annotated[dict[ShortText, ShortText], Meta(max_length=wire.READ_ERRORS_MAX)] | None = None
    processes_error: str | None = None
    tensor_active: Percent | None = None
    dram_active: Percent | None = None
    gr_active: Percent | None = None
    memory_temperature: Celsius | None = None
    energy_mj: Bytes | None = None
    recovery_action: str | None = None
    remapped_correctable: Bytes | None = None
    remapped_uncorrectable: Bytes | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None


class SlurmAllocation(_Sample):
    """A Slurm job holding GPUs on the host, used or not (wire.SlurmAllocation)."""

    job: str
    gpu_indexes: list[Index]
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None


class Snapshot(_Sample, tag_field="type", tag="snapshot"):
    """A sample of every GPU of a host (wire.Snapshot). ``proto`` is the agent's version, so required."""

    type: ClassVar[Literal["snapshot"]] = "snapshot"
    proto: Proto
    ts: Seconds
    seq: Seq
    gpus: list[GpuSample] = msgspec.field(default_factory=list)
    allocations: list[SlurmAllocation] = msgspec.field(default_factory=list)


class Heartbeat(_Sample, tag_field="type", tag="heartbeat"):
    """Liveness with nothing else to say (wire.Heartbeat)."""

    type: ClassVar[Literal["heartbeat"]] = "heartbeat"
    proto: Proto
    ts: Seconds
    seq: Seq = 0


class GpuDelta(GpuSample, omit_defaults=True):
    """One GPU of a :class:`Delta` (1.3, agent/delta.py): its readings as a GpuSample, and its process
    changes. Its constants (delta.GPU_CONSTANTS) and processes are UNSET in a delta: a line that carries any
    (even as null) fails here and goes to the reference decoder, which ignores and counts them. The host's
    edge (collector/transport/delta.py) sets them from its base and hands the object on as the GPU's sample:
    it *is* a GpuSample (field for field, plus the three delta fields, then None)."""

    uuid: UnsetType = UNSET  # type: ignore[assignment]
    name: UnsetType = UNSET  # type: ignore[assignment]
    serial: UnsetType = UNSET  # type: ignore[assignment]
    pci_bus_id: UnsetType = UNSET  # type: ignore[assignment]
    memory_total: UnsetType = UNSET  # type: ignore[assignment]
    power_limit: UnsetType = UNSET  # type: ignore[assignment]
    temp_slowdown: UnsetType = UNSET  # type: ignore[assignment]
    temp_shutdown: UnsetType = UNSET  # type: ignore[assignment]
    mig_mode: UnsetType = UNSET  # type: ignore[assignment]
    processes: UnsetType = UNSET  # type: ignore[assignment]
    pids: list[Pid] | None = None
    changed: list[ProcessSample] | None = None
    util: list[tuple[Pid, Percent | None, Percent | None]] | None = None


class Delta(_Sample, tag_field="type", tag="delta"):
    """A sample as what changed since the frame of seq ``base`` (wire.Delta). The stream's edge turns it
    into a :class:`Snapshot`: no one past it sees a delta."""

    type: ClassVar[Literal["delta"]] = "delta"
    proto: Proto
    ts: Seconds
    seq: Seq
    base: Seq
    gpus: list[GpuDelta] = msgspec.field(default_factory=list)
    allocations: list[SlurmAllocation] | None = None  # None: as before


#: Every frame the collector handles: the samples as Structs, the rare frames as the wire's dataclasses.
#: (A Delta never gets past the stream's edge, which makes it a Snapshot.)
Frame = Snapshot | Heartbeat | wire.Hello | wire.Event

_NAMES: Final[dict[type[_Sample], tuple[str, ...]]] = {
    cls: tuple(cls.__struct_fields__) for cls in (ProcessSample, MigInstance, GpuSample, SlurmAllocation)}


def _values(obj: object, cls: type[_Sample]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in _NAMES[cls]}


def _gpu(g: wire.GpuSample) -> GpuSample:
    values = _values(g, GpuSample)
    values["processes"] = [ProcessSample(**_values(p, ProcessSample)) for p in g.processes]
    values["mig_instances"] = [MigInstance(**_values(m, MigInstance)) for m in g.mig_instances]
    return GpuSample(**values)


def _gpu_delta(change: wire.GpuChange) -> GpuDelta:
    values = {k: v for k, v in _values(change.sample, GpuSample).items() if k in delta.READINGS}
    values["mig_instances"] = [MigInstance(**_values(m, MigInstance)) for m in change.sample.mig_instances]
    return GpuDelta(**values, pids=change.pids,
                    changed=[ProcessSample(**_values(p, ProcessSample)) for p in change.changed] or None,
                    util=list(change.util) or None)


def from_wire(frame: wire.Frame) -> Frame | Delta:
    """The collector's frame for one the reference decoder (or a test) built: snapshots, deltas and
    heartbeats become Structs with the same values, unchecked (the reference has decided); others pass as
    they are."""
    if isinstance(frame, wire.Delta):
        allocations = None if frame.allocations is None else [
            SlurmAllocation(**_values(a, SlurmAllocation)) for a in frame.allocations]
        return Delta(ts=frame.ts, seq=frame.seq, base=frame.base, proto=frame.proto,
                     gpus=[_gpu_delta(c) for c in frame.gpus], allocations=allocations)
    if isinstance(frame, wire.Snapshot):
        allocations = [SlurmAllocation(**_values(a, SlurmAllocation)) for a in frame.allocations]
        return Snapshot(ts=frame.ts, seq=frame.seq, gpus=[_gpu(g) for g in frame.gpus], proto=frame.proto,
                        allocations=allocations)
    if isinstance(frame, wire.Heartbeat):
        return Heartbeat(ts=frame.ts, seq=frame.seq, proto=frame.proto)
    return frame


_ENCODER: Final = msgspec.json.Encoder()


def encode(frame: Snapshot | Heartbeat) -> bytes:
    """One sample as a wire line (the simulator's and tests' frames; the agent has its own encoder)."""
    return _ENCODER.encode(frame) + b"\n"
