"""The fleet model shared across threads and processes: what ``gpufleet status``, ``hosts`` and ``--json``
show whichever source built it, and a host's record as the store writes and reads it.

Plain dataclasses, no behaviour; :mod:`gpufleet.collector.fleet.query` builds the views (from the live view
or stored rows) and :mod:`gpufleet.collector.model.codec` writes and reads their JSON. The live, mutable
state of a host is :class:`gpufleet.collector.fleet.live.HostState`; :class:`HostRecord` is its copy at one
moment, for the store's writer thread and back out of the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

#: A host's connection status, as the transport reports it.
#: ``maintenance``: the collector let go of the host on purpose (collector/fleet/maintenance.py) and does not
#: dial it until the window ends; neither up nor down, so host_down does not fire for it.
HostStatus = Literal["connecting", "up", "down", "maintenance"]
#: Every status, in order (the metrics' per-status counts read it: one owner of the list)
HOST_STATUSES: Final[tuple[HostStatus, ...]] = get_args(HostStatus)
#: The status of a host the store has samples of but no row for, and the state of a GPU on a host that is
#: not up: not known.
UNKNOWN: Final = "unknown"


@dataclass(slots=True)
class HostRecord:
    """One host's identity and connection facts at a moment: what the writer stores (a copy, as the live
    view keeps mutating its HostState) and what the store's ``hosts`` answers."""

    name: str
    status: str  # HostStatus: connecting | up | down | maintenance
    reason: str | None = None
    last_seen: float | None = None
    agent_version: str | None = None
    driver_version: str | None = None
    tags: list[str] = field(default_factory=list)
    since: float | None = None  # when the status last changed
    nvml_version: str | None = None
    cuda_version: int | None = None
    reported_hostname: str | None = None  # what hello claimed; informational only
    backend: str | None = None


@dataclass(slots=True)
class MaintenanceRecord:
    """A host let go of for maintenance (collector/maintenance.py): no agent session from ``starts_at`` until
    ``ends_at`` (or until stopped: ``ends_at`` is then the stop time), its alerts muted by the silence
    ``silence_id``. What the store keeps, and what status and hosts show under the host."""

    host: str
    starts_at: float
    ends_at: float
    created_by: str  # the peer's real user name (SO_PEERCRED), never what the client claimed
    comment: str
    silence_id: int | None = None
    id: int | None = None


@dataclass(slots=True)
class ProcView:
    pid: int
    user: str | None
    command: str | None  # short: program (and script) name
    memory: int | None  # bytes of GPU memory
    running_for: float | None  # seconds since the process started
    state: str | None  # /proc state letter (Z = zombie)
    sm_util: int | None = None
    container: str | None = None
    job: str | None = None  # Slurm job id (from the cgroup)
    # what Slurm says of the job (the agent's scontrol, wire 1.1); None until known or without Slurm
    job_name: str | None = None
    job_account: str | None = None
    job_partition: str | None = None
    job_state: str | None = None
    # the Kubernetes pod the process runs in, as the kubelet's directories name it on the node (wire 1.2)
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None


@dataclass(slots=True)
class AllocationView:
    """A running Slurm job's GPUs on one host: allocated, used by its processes, unused
    (collector/model/allocation.py decides which)."""

    job: str
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    gpus: list[int] = field(default_factory=list)  # the GPU indexes Slurm gave the job here
    used: list[int] = field(default_factory=list)
    unused: list[int] = field(default_factory=list)


#: What a GPU is doing, as every view counts it (status, top, the web page, metrics): each GPU is in exactly
#: one, so the fleet line adds up. busy: allocated and not wasted; wasted: a waste rule (the catalog's
#: ``waste``) fires on it; idle: free capacity; unused: a running Slurm job holds it and runs nothing on it
#: (not capacity; wasted once allocated_unused fires); lost / hung / unreadable: the agent could not read it;
#: unknown: its host is down or connecting (the readings are old); maintenance: its host is let go of on
#: purpose. collector/model/summary.py :func:`fleet_state` decides it.
GpuState = Literal["busy", "wasted", "idle", "unused", "lost", "hung", "unreadable", "unknown", "maintenance"]
GPU_STATES: Final[tuple[GpuState, ...]] = get_args(GpuState)


@dataclass(slots=True)
class GpuView:
    index: int
    uuid: str
    name: str | None
    state: str  # a GpuState
    util: int | None
    mem_used: int | None
    mem_total: int | None
    temp: int | None
    power: float | None
    power_limit: float | None
    error: str | None = None
    fan: int | None = None  # percent; None where the card has no fan (or the source has no fan reading)
    flags: list[str] = field(default_factory=list)
    allocated_to: str | None = None  # the running Slurm job holding the GPU (its host's AllocationView)
    fault: str | None = None  # with ``error``: lost | hung | unreadable (the agent's GPU_FAULTS)
    processes: list[ProcView] = field(default_factory=list)


@dataclass(slots=True)
class HostView:
    name: str
    status: str  # a HostStatus (collector/live.py); "unknown" from the store for a host it has no row of
    reason: str | None
    last_seen: float | None
    age: float | None  # seconds since last_seen
    tags: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # host-level alerts (down, xid without a gpu, ...)
    sample_ts: float | None = None
    maintenance: MaintenanceRecord | None = None  # while status is "maintenance" (live view only)
    allocations: list[AllocationView] = field(default_factory=list)  # running Slurm jobs' GPUs (live only)
    gpus: list[GpuView] = field(default_factory=list)


@dataclass(slots=True)
class Totals:
    hosts: int = 0
    hosts_up: int = 0
    hosts_down: int = 0
    hosts_connecting: int = 0
    gpus: int = 0
    busy: int = 0
    idle: int = 0
    wasted: int = 0
    hot: int = 0
    stale: int = 0
    lost: int = 0
    unknown: int = 0
    orphaned: int = 0  # additive (after the original fields): GPUs flagged orphaned (memory, no process)
    hosts_maintenance: int = 0  # hosts let go of for maintenance (not counted as down or connecting)
    unused: int = 0  # GPUs a running Slurm job holds with nothing running on them (state unused)
    # GPUs by GpuState: busy + wasted + idle + unused + lost + hung + unreadable + unknown + maintenance
    # == gpus; hot, stale and orphaned above count flags (a stale or orphaned GPU is also in ``wasted``)
    hung: int = 0
    unreadable: int = 0
    maintenance: int = 0


@dataclass(slots=True)
class FleetView:
    generated_at: float
    source: str  # live | store
    hosts: list[HostView] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    filters: dict[str, Any] = field(default_factory=dict)
    last_sample: float | None = None  # newest sample time in the view


@dataclass(slots=True)
class UserUsage:
    """One line of ``status --by user``."""

    user: str
    gpus: int
    hosts: list[str]
    memory: int
    wasted: int
    mean_util: float | None
    longest: float | None  # longest-running process, seconds


@dataclass(slots=True)
class HostInfo:
    """One line of ``gpufleet hosts``."""

    name: str
    status: str
    reason: str | None
    since: float | None
    last_seen: float | None
    tags: list[str]
    gpus: int
    agent_version: str | None = None
    driver_version: str | None = None
    backend: str | None = None
    connects: int | None = None
    reconnects: int | None = None
    frames: int | None = None
    bad_frames: int | None = None
    lag: float | None = None
    shed: int | None = None  # snapshots the store did not keep (overload: collector/store/shedding.py)
    # what the edge noticed (HostState in collector/fleet/live.py says what each means)
    nulled_values: int | None = None
    last_nulled: str | None = None
    clock_skew: float | None = None
    ignored_frames: int | None = None
    ignored_fields: int | None = None
    last_ignored: str | None = None
    over_budget: bool | None = None
    dropped_frames: int | None = None
    dropped_events: int | None = None
    maintenance: MaintenanceRecord | None = None  # while status is "maintenance"


def pod_label(namespace: str | None, name: str | None, container: str | None = None) -> str | None:
    """How a Kubernetes pod is shown everywhere, as kubectl names it: ``ml/train-0`` once the kubelet's
    directories named it, with the container where the screen has room: ``ml/train-0 (trainer)``."""
    if not name:
        return None
    label = f"{namespace}/{name}" if namespace else name
    return f"{label} ({container})" if container else label


def where_label(p: ProcView, wide: bool = True) -> str | None:
    """What a process runs in, as every screen shows it: its Slurm job, else its pod, else (``wide``) its
    container id."""
    job = slurm_label(p.job, p.job_name)
    if job is not None and (wide or p.job_name):
        return job
    pod = pod_label(p.pod_namespace, p.pod_name, p.container_name if wide else None)
    if pod is not None:
        return pod
    return p.container if wide else None


def allocation_label(a: AllocationView) -> str:
    """``812 llama-pretrain (alice, nlp)``: a Slurm job holding GPUs, as the status view names it."""
    label = slurm_label(a.job, a.name) or a.job
    who = ", ".join(x for x in (a.user, a.account) if x)
    return f"{label} ({who})" if who else label


def slurm_label(job: str | None, name: str | None, account: str | None = None,
                partition: str | None = None) -> str | None:
    """How a Slurm job is shown everywhere: ``12345 train-llm`` once Slurm named it, ``job 12345`` before;
    with its account and partition where the screen has room: ``12345 train-llm (nlp/h100)``."""
    if not job:
        return None
    label = f"{job} {name}" if name else f"job {job}"
    extra = "/".join(x for x in (account, partition) if x)
    return f"{label} ({extra})" if extra else label
