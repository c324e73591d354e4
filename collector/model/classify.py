"""The one definition of what a GPU sample is doing: busy, idle, stuck, free, orphaned, and who holds it.

Every reader of "is this GPU wasted?" calls this module: the usage rules (wasted, idle, orphaned_memory),
the GPU-hours accounting in the store, the status screen's busy/idle state and the report. So the alert,
the report and ``status`` can never disagree about a sample; only *how long* a condition must last (the
rule's ``for``, its spike tolerance) belongs to the rules.

Per sample (DESIGN.md: combine signals):
- *activity*: ``busy``, ``idle`` or ``stuck``, or None when the sample cannot be judged (an error, or no util
  and no per-process SM util). Util (NVML's "a kernel ran" share, or the processes' SM util) is one signal;
  a verdict needs a second one where NVML has it (:func:`activity`):
  - *work seen*: memory bandwidth util at least ``mem_busy_at_least``, SM activity (GPM, Hopper+) at least
    ``sm_active_at_least``, or, for low util, power at least ``power_idle_ratio`` of the limit;
  - *no work seen*: power under ``stuck_power_ratio`` of the limit, or SM activity under
    ``sm_active_at_least``. Low memory traffic is not one: a compute-bound kernel moves little memory.
  Util at or above ``util_below`` is busy when work is seen or nothing denies it (util alone, where the other
  signals are absent or off), and *stuck* when a signal sees no work and none sees work: a kernel is resident
  but the GPU does not compute (a hung collective, a spinning kernel). Util under ``util_below`` is idle
  unless work is seen (a memory-bound or copy-bound phase between kernels is work, not waste).
- *holders*: each user's non-zombie processes holding at least ``min_memory_bytes`` (zombies are stale).
- *wasting*: the holders of a sample whose activity is idle or stuck (the ``wasted`` rule's users);
  *waste*: those plus zombies holding memory (``stale``): what GPU-hours "wasted" counts.
- *free*: nothing allocated (no process, memory under ``free_max_memory_bytes``, util 0) and not held by a
  running Slurm job (collector/model/allocation.py: a GPU Slurm gave a job is not capacity anyone else can
  have, used or not): capacity.
- *orphaned*: memory in use (at least ``min_memory_bytes``) with no process visible, not a MIG GPU.
The thresholds come from the ``wasted``, ``idle`` and ``orphaned_memory`` rules' parameters
(collector/model/thresholds.py), whose defaults live in the rule catalog (collector/rules/catalog.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gpufleet.collector.model.sample import GpuSample, ProcessSample
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS, Thresholds

Activity = Literal["busy", "idle", "stuck"]
#: The name of a process /proc could not attribute (same in alerts, GPU-hours and history).
UNATTRIBUTED = "?"


def user_of(p: ProcessSample) -> str:
    """The name a process is credited to: its user, else ``uid<N>``, else ``?``."""
    if p.user:
        return p.user
    return f"uid{p.uid}" if p.uid is not None else UNATTRIBUTED


def holds_memory(p: ProcessSample) -> bool:
    """Listed with GPU memory in use, or with memory NVML could not read: it holds the GPU (GPU-hours, jobs).
    A process listed with 0 bytes holds nothing."""
    return p.gpu_memory is None or p.gpu_memory > 0


def is_zombie(p: ProcessSample) -> bool:
    return (p.state or "").startswith("Z")


def activity(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> Activity | None:
    """busy / idle / stuck for one sample, or None when it cannot be judged (rules: the module docstring)."""
    if g.error:
        return None
    util: float | None = g.util_gpu
    if util is None:
        sm_util = [p.sm_util for p in g.processes if p.sm_util is not None]
        util = max(sm_util) if sm_util else None
    if util is None:
        return None
    power = g.power_draw / g.power_limit if g.power_draw is not None and g.power_limit else None
    mem = g.util_mem if t.mem_busy_at_least > 0 else None
    sm = g.sm_active if t.sm_active_at_least > 0 else None
    work = (mem is not None and mem >= t.mem_busy_at_least) or (sm is not None and sm >= t.sm_active_at_least)
    if util >= t.util_below:
        if work:
            return "busy"
        cold = t.stuck_power_ratio > 0 and power is not None and power < t.stuck_power_ratio
        no_work = cold or sm is not None  # sm under its threshold here (else work)
        return "stuck" if no_work else "busy"
    if work:
        return "busy"
    if t.power_idle_ratio > 0 and power is not None:
        return "idle" if power < t.power_idle_ratio else "busy"
    return "idle"


def holdings(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> tuple[dict[str, list[ProcessSample]],
                                                                         list[ProcessSample]]:
    """(:func:`holders`, the zombie processes) of one sample, in one pass over its processes."""
    out: dict[str, list[ProcessSample]] = {}
    zombies: list[ProcessSample] = []
    for p in g.processes:
        if is_zombie(p):
            zombies.append(p)
            continue
        mem = p.gpu_memory
        if mem is None or mem < t.min_memory_bytes:
            continue
        out.setdefault(user_of(p), []).append(p)
    return out, zombies


def holders(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, list[ProcessSample]]:
    """user -> their live processes holding at least ``min_memory_bytes`` on the GPU."""
    return holdings(g, t)[0]


def wasting_users(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    """The users this one sample counts as wasting the GPU (idle or stuck while they hold it)."""
    if activity(g, t) not in ("idle", "stuck"):
        return []
    return sorted(holders(g, t))


def waste_users(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    """Every user whose holding of this sample is waste, by any waste rule: idle or stuck holders (``wasted``)
    and zombies still holding at least ``min_memory_bytes`` (``stale``). GPU-hours "wasted" counts these;
    orphaned memory is charged to nobody (collector/fleet/accounting.py)."""
    held, zombies = holdings(g, t)
    return waste_of(activity(g, t), held, zombies, t)


def waste_of(kind: Activity | None, held: Mapping[str, Any], zombies: Sequence[ProcessSample],
             t: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    """:func:`waste_users` from a sample's activity and :func:`holdings` already worked out
    (collector/model/facts.py)."""
    users = set(held) if kind in ("idle", "stuck") else set()
    for p in zombies:
        if p.gpu_memory is not None and p.gpu_memory >= t.min_memory_bytes:
            users.add(user_of(p))
    return sorted(users)


def processes_unknown(g: GpuSample) -> bool:
    """The agent could not read this GPU's process list (agent 1.2 ``processes_error``): an empty
    ``processes`` then says nothing, and no verdict may be read from it (issue 32)."""
    return g.processes_error is not None


def is_free(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS, allocated: bool = False) -> bool:
    """Nothing allocated: no process, (almost) no memory used, 0 % util, and (``allocated`` False) no running
    Slurm job holds it (allocation.allocated_indexes): free capacity."""
    if allocated or g.error or g.processes or processes_unknown(g):
        return False
    return free_reading(g.util_gpu, g.memory_used, t)


def free_reading(util: float | None, memory_used: float | None, t: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """The readings of a GPU nothing is allocated on: 0 % util, (almost) no memory used. :func:`is_free`
    without the process list, for history, which keeps readings per sample but processes as spans."""
    if util is None or util > 0:
        return False
    return memory_used is not None and memory_used < t.free_max_memory_bytes


def orphaned_bytes(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS) -> int | None:
    """Memory in use with no process visible (None when there is none worth flagging, or MIG, or the
    process list could not be read: "unknown" is never "no process")."""
    if g.error or g.mig_mode or g.processes or processes_unknown(g) or g.memory_used is None:
        return None
    return g.memory_used if g.memory_used >= t.orphan_min_bytes else None


SampleState = Literal["busy", "idle", "unused", "lost", "hung", "unreadable"]


def gpu_state(g: GpuSample, t: Thresholds = DEFAULT_THRESHOLDS, allocated: bool = False) -> SampleState:
    """What one sample says of its GPU: lost (fell off the bus), hung (an NVML call on it does not
    return), unreadable (the agent may not open it: the GPU itself may be fine), idle (free capacity),
    unused (nothing runs on it, but a running Slurm job holds it: not capacity either) or busy (allocated).
    Whether a busy GPU is *wasted* is the alerts' verdict over time, which the views add
    (collector/model/summary.py :func:`~gpufleet.collector.model.summary.fleet_state`)."""
    if g.error:
        return "unreadable" if g.fault == "unreadable" else "hung" if g.fault == "hung" else "lost"
    if not is_free(g, t):
        return "busy"
    return "unused" if allocated else "idle"
