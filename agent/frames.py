"""The frames of the wire protocol (agent/wire.py has their encoding and validation): what a hello,
snapshot, delta, event and heartbeat hold, and the protocol version they speak. Standard library only: the
agent ships as a zipapp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

PROTO_MAJOR: Final = 1
#: 1.1: ProcessSample job_name/job_user/job_account/job_partition/job_state (Slurm, from scontrol); a 1.0
#: collector ignores them (unknown fields of its own major version).
#: 1.2: NVML as real drivers behave (issue 32): GpuSample fault/read_errors/processes_error, the health
#: fields (recovery_action, remapped rows, memory_temperature, energy_mj), GPM tensor/DRAM/engine activity;
#: ProcessSample gi_id/ci_id and kind "mps"; MigInstance sm_active; the "gpu_hung" event. Issue 37: Snapshot
#: allocations (the GPUs Slurm gave each running job here, used or not); ProcessSample pod_namespace,
#: pod_name, container_name (Kubernetes names from the kubelet's log directories).
#: 1.3: send only what changed (issue 33): hello ``delta``; the ``delta`` frame once the collector accepts it
#: on the agent's stdin (agent/delta.py). Snapshot, event and heartbeat frames are unchanged.
PROTO_MINOR: Final = 3
PROTO_VERSION: Final = f"{PROTO_MAJOR}.{PROTO_MINOR}"
#: The version the frames that did not change in 1.3 carry (snapshot, event, heartbeat): their format is
#: 1.2's, and a 1.2 collector takes a frame of its own version on its fast path (collector/transport/
#: wirefast.py), so a 1.3 agent talking to it in full frames costs it no more than a 1.2 agent did.
FRAME_PROTO: Final = "1.2"

FrameType = Literal["hello", "snapshot", "delta", "event", "heartbeat"]
EventKind = Literal["xid", "gpu_lost", "gpu_hung", "driver_error", "nvml_error", "agent_error"]
EVENT_KINDS: Final = ("xid", "gpu_lost", "gpu_hung", "driver_error", "nvml_error", "agent_error")

#: Why a GpuSample carries ``error`` (1.2). None from older agents means "lost".
GPU_FAULTS: Final = ("lost", "unreadable", "hung")



@dataclass(slots=True)
class ProcessSample:
    """One process holding a GPU, with what /proc says about it.

    ``attributed`` is False when /proc could not be read (hidepid, other PID namespace, exited):
    the process is then *unattributed*, never assumed dead.
    """

    pid: int
    kind: str = "compute"  # "compute" | "graphics" | "compute+graphics" | "mps" (an MPS client)
    gpu_memory: int | None = None  # bytes
    sm_util: int | None = None  # percent, clamped 0..100
    mem_util: int | None = None
    user: str | None = None
    uid: int | None = None
    command: str | None = None
    start_time: float | None = None  # unix seconds
    state: str | None = None  # /proc state letter: R S D Z T ...
    ppid: int | None = None
    container: str | None = None
    pod: str | None = None
    job: str | None = None  # Slurm job id
    attributed: bool = True
    # 1.1: what Slurm says of ``job`` (agent/slurm.py); absent until the agent's lookup answered
    job_name: str | None = None
    job_user: str | None = None
    job_account: str | None = None
    job_partition: str | None = None
    job_state: str | None = None  # RUNNING, COMPLETING, ...
    # 1.2: the MIG instance the process runs in (None outside MIG)
    gi_id: int | None = None
    ci_id: int | None = None
    # Kubernetes names of ``pod`` (a uid) and ``container`` (an id), from the kubelet's log directories on
    # the node (agent/k8s.py); absent where the agent could not resolve them
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None


@dataclass(slots=True)
class MigInstance:
    gi_id: int
    ci_id: int | None = None
    uuid: str | None = None
    profile: str | None = None  # "1g.10gb"
    memory_total: int | None = None
    memory_used: int | None = None
    sm_active: int | None = None  # 1.2: GPM SM activity of this instance (Hopper+)


@dataclass(slots=True)
class GpuSample:
    """One GPU at one instant. Every reading may be None (not supported, no permission, or failed: then
    ``read_errors`` names it).

    ``error`` is set when the GPU could not be read at all, and ``fault`` says why: "lost" (NVML says it is
    gone, or every reading failed for several samples), "unreadable" (the agent may not open it: the GPU is
    fine) or "hung" (an NVML call on it has not returned). The other GPUs in the snapshot are unaffected.
    ``processes_error`` set means the process list could not be read: ``processes`` is then unknown, not
    empty, and no rule may read "no process" from it.
    """

    index: int
    uuid: str
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    util_gpu: int | None = None  # percent
    util_mem: int | None = None  # memory bandwidth (controller busy), percent
    memory_total: int | None = None  # bytes
    memory_used: int | None = None
    memory_reserved: int | None = None
    temperature: int | None = None  # Celsius
    temp_slowdown: int | None = None
    temp_shutdown: int | None = None
    power_draw: float | None = None  # watts
    power_limit: float | None = None
    clock_sm: int | None = None  # MHz
    clock_mem: int | None = None
    throttle_reasons: list[str] | None = None
    fan_speed: int | None = None  # percent
    ecc_corrected: int | None = None  # volatile counts since driver load
    ecc_uncorrected: int | None = None
    mig_mode: bool | None = None
    mig_instances: list[MigInstance] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    error: str | None = None
    sm_active: int | None = None  # percent of SMs busy since the previous sample (GPM, Hopper+)
    # 1.2
    fault: str | None = None  # one of GPU_FAULTS when ``error`` is set
    read_errors: dict[str, str] | None = None  # field -> NVML error name, for readings nulled by a failure
    processes_error: str | None = None  # why the process list is unknown (an NVML error name)
    tensor_active: int | None = None  # GPM: percent of time any tensor pipe was busy
    dram_active: int | None = None  # GPM: percent of DRAM bandwidth used
    gr_active: int | None = None  # GPM: percent of time any graphics/compute engine was busy
    memory_temperature: int | None = None  # HBM, Celsius
    energy_mj: int | None = None  # energy used since the driver loaded, millijoules
    recovery_action: str | None = None  # NVML's GPU recovery action: "none", "gpu_reset", "node_reboot", ...
    remapped_correctable: int | None = None  # rows remapped for correctable errors
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None  # a remap waits for the next GPU reset
    remap_failed: bool | None = None  # remapping failed: the GPU should be replaced


@dataclass(slots=True)
class GpuInfo:
    """Static facts about a GPU, sent in ``hello``."""

    index: int
    uuid: str
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    memory_total: int | None = None
    power_limit: float | None = None
    temp_slowdown: int | None = None
    temp_shutdown: int | None = None
    mig_mode: bool | None = None


@dataclass(slots=True)
class Hello:
    agent_version: str
    hostname: str
    ts: float
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_version: int | None = None
    backend: str = "nvml"  # "nvml" | "fake"
    pid_namespace_ok: bool | None = None  # False: agent cannot see host PIDs (container without --pid=host)
    gpus: list[GpuInfo] = field(default_factory=list)
    type: Literal["hello"] = "hello"
    proto: str = PROTO_VERSION
    #: 1.3: the agent sends ``delta`` frames once the collector accepts them on its stdin (agent/delta.py)
    delta: bool | None = None


@dataclass(slots=True)
class SlurmAllocation:
    """A Slurm job that holds GPUs on this host, whether or not any of its processes uses them.

    ``gpu_indexes`` are Slurm's GRES indexes on this node (``scontrol show job -d``: ``GRES=gpu:2(IDX:0-1)``);
    they are NVML's indexes where gres.conf lists ``/dev/nvidia0..N`` in order and NVML enumerates the GPUs
    in minor-number order, the common case. The other fields are what Slurm says of the job.
    """

    job: str  # Slurm job id
    gpu_indexes: list[int]
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None  # RUNNING, SUSPENDED, COMPLETING, ...


@dataclass(slots=True)
class Snapshot:
    ts: float
    seq: int
    gpus: list[GpuSample] = field(default_factory=list)
    type: Literal["snapshot"] = "snapshot"
    proto: str = FRAME_PROTO
    #: the Slurm jobs holding GPUs on this host (agent/slurm.py; refreshed every 30 s, off the sampling
    #: path); absent: none, or no Slurm here
    allocations: list[SlurmAllocation] = field(default_factory=list)


@dataclass(slots=True)
class Event:
    ts: float
    kind: str  # one of EVENT_KINDS; unknown kinds are kept (forward compatible)
    message: str = ""
    gpu_index: int | None = None
    uuid: str | None = None
    xid: int | None = None
    type: Literal["event"] = "event"
    proto: str = FRAME_PROTO


@dataclass(slots=True)
class Heartbeat:
    ts: float
    seq: int = 0
    type: Literal["heartbeat"] = "heartbeat"
    proto: str = FRAME_PROTO


@dataclass(slots=True)
class GpuChange:
    """One GPU of a :class:`Delta` (agent/delta.py has the rules): ``sample`` holds its readings now (every
    field but the GPU's constants and its processes; ``uuid`` is ""), ``pids`` its processes in order when
    they changed, ``changed`` its processes that are new or changed (but for their utilization), ``util``
    [pid, sm_util, mem_util] of those whose utilization alone changed."""

    sample: GpuSample
    pids: list[int] | None = None
    changed: list[ProcessSample] = field(default_factory=list)
    util: list[tuple[int, int | None, int | None]] = field(default_factory=list)


@dataclass(slots=True)
class Delta:
    """A sample as what changed since the frame of seq ``base`` (1.3, agent/delta.py). ``allocations`` None:
    as before."""

    ts: float
    seq: int
    base: int
    gpus: list[GpuChange] = field(default_factory=list)
    allocations: list[SlurmAllocation] | None = None
    type: Literal["delta"] = "delta"
    proto: str = PROTO_VERSION


Frame = Hello | Snapshot | Delta | Event | Heartbeat
