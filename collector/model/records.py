"""Rows the store returns and accepts: the contract between storage, alerts, the query API and the CLI.

Plain dataclasses (no sqlite types leak out). Times are unix seconds (float). Memory is bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

AlertState = Literal["pending", "firing", "resolved"]


@dataclass(slots=True)
class SeriesPoint:
    """One point of a GPU's history. Raw samples have min == mean == max."""

    ts: float  # bucket start (rollups) or sample time (raw)
    util_mean: float | None
    util_max: float | None
    mem_used_mean: float | None
    mem_used_max: float | None
    temp_max: float | None
    power_mean: float | None


@dataclass(slots=True)
class GpuSeries:
    host: str
    index: int
    uuid: str
    name: str | None
    resolution: str  # "raw" | "1m" | "1h"
    memory_total: int | None
    points: list[SeriesPoint] = field(default_factory=list)
    step: float | None = None  # seconds per point (a rollup, possibly merged wider); None for raw samples


@dataclass(slots=True)
class RawSeries:
    """One GPU's raw samples as columns (Store.raw_history): a chart of an hour at 1 s without an object
    per point. The lists line up with ``ts``; a reading may be None (not reported)."""

    host: str
    index: int
    uuid: str
    name: str | None
    memory_total: int | None
    ts: list[float] = field(default_factory=list)
    util: list[int | None] = field(default_factory=list)
    mem_used: list[int | None] = field(default_factory=list)
    temp: list[int | None] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)


@dataclass(slots=True)
class ProcessSpan:
    """A process seen on a GPU from first to last sample."""

    host: str
    gpu_index: int
    uuid: str
    pid: int
    user: str | None
    command: str | None
    first_seen: float
    last_seen: float
    max_gpu_memory: int | None
    mean_sm_util: float | None
    container: str | None = None
    job: str | None = None
    job_name: str | None = None  # job_*: from slurm_jobs (what the agent's scontrol said of ``job``)
    job_account: str | None = None
    job_partition: str | None = None
    job_state: str | None = None
    started: float | None = None  # the process's own start time (/proc), where the agent could read it


@dataclass(slots=True)
class UsageRow:
    """GPU time per user (and host) in a range. held: the user's processes held GPU memory; used: held
    weighted by GPU util; wasted: held while util stayed under the wasted threshold."""

    user: str
    host: str | None
    gpu_hours_held: float
    gpu_hours_used: float
    gpu_hours_wasted: float


@dataclass(slots=True)
class CapacityRow:
    """GPU time of one host in a range: observed (the GPUs sampled) and free (nothing allocated on them)."""

    host: str
    gpu_hours_observed: float
    gpu_hours_free: float


@dataclass(slots=True)
class EventRow:
    host: str
    ts: float
    kind: str
    message: str
    gpu_index: int | None
    uuid: str | None
    xid: int | None


@dataclass(slots=True)
class AlertRecord:
    """One alert instance, identified by its fingerprint (a hash of rule + labels)."""

    fingerprint: str
    rule: str
    severity: str
    state: AlertState
    labels: dict[str, str] = field(default_factory=dict)  # host, gpu, user, rule, ...
    annotations: dict[str, str] = field(default_factory=dict)  # summary, description, resolved message
    started_at: float = 0.0  # condition first seen true
    fired_at: float | None = None
    resolved_at: float | None = None
    last_notified_at: float | None = None
    updated_at: float = 0.0
    value: float | None = None


#: A JobRecord's pod names, in order (the store keeps them as one JSON list).
POD_FIELDS: Final = ("pod_namespace", "pod_name", "container_name")


@dataclass(slots=True)
class JobRecord:
    """One job's efficiency summary, written when it released its GPUs (collector/fleet/jobs.py).

    ``key``: collector/model/jobkey.py's job identity (Slurm job, container, or pid + start time). Hours are
    GPU-hours held (a GPU counts while the job's processes hold memory on it); ``mean_util`` is weighted by
    them; ``waste_pct`` is the share of them :func:`classify.waste_users` counts as waste (idle, stuck or
    zombie); ``diagnoses``: the rules that fired on the job's GPUs while it held them. ``gpus``: the GPUs
    its processes held (used); a Slurm job also has the GPUs Slurm gave it (``gpus_allocated``, used or
    not) and their allocated and unused hours (collector/model/allocation.py)."""

    key: str
    user: str
    started: float  # the earliest process start time (else first seen)
    ended: float  # last seen holding a GPU
    hosts: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)  # "host:index"
    command: str | None = None
    gpu_hours: float = 0.0
    mean_util: float | None = None
    peak_util: float | None = None
    peak_memory: int | None = None  # bytes, on one GPU
    waste_pct: float | None = None
    diagnoses: list[str] = field(default_factory=list)
    # a Slurm job's name, account and partition, read from slurm_jobs (not stored in the record)
    slurm_name: str | None = None
    slurm_account: str | None = None
    slurm_partition: str | None = None
    # a Slurm job's GPUs as Slurm gave them ("host:index"; used or not) and their hours (accounting.py)
    gpus_allocated: list[str] = field(default_factory=list)
    gpu_hours_allocated: float = 0.0
    gpu_hours_unused: float = 0.0
    # a pod's job: the names the agent resolved on the node (views.pod_label shows them)
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None


@dataclass(slots=True)
class SilenceRecord:
    """Mutes alerts whose labels match every matcher (exact or shell glob) between starts_at and ends_at."""

    matchers: dict[str, str]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""
    created_at: float = 0.0
    id: int | None = None


@dataclass(slots=True)
class SlurmUsageRow:
    """GPU-hours of one Slurm account, partition or user over a range (held/used/wasted as in ``usage``;
    allocated to running jobs and, of those, unused by them: collector/fleet/accounting.py)."""

    name: str  # the account, partition or user; "(unresolved)" while Slurm has not named the job
    gpu_hours_held: float
    gpu_hours_used: float
    gpu_hours_wasted: float
    jobs: int
    gpu_hours_allocated: float = 0.0
    gpu_hours_unused: float = 0.0


@dataclass(slots=True)
class SlurmJobRow:
    host: str
    job: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    first_seen: float
    last_seen: float
