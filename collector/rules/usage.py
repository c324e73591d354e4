"""Usage rules: wasted GPU, idle GPU, stale process, orphaned memory.

What a sample is (busy / idle / stuck, who holds it, free, orphaned) is decided by
:mod:`gpufleet.collector.model.classify`, the one definition the GPU-hours accounting and ``status`` use too;
these rules add only *how long* it must last:
- Idle and stuck samples both extend a streak. Busy spikes up to ``spike_tolerance`` seconds (default 60)
  inside a streak are ignored: the condition only clears when the GPU stays busy longer than that, or when
  it is busy for more than ``busy_share`` (0.5) of the time (a moving average over 5 x spike_tolerance):
  a GPU that saws between computing and waiting (input_bound) is used, though no busy run is long. While
  that share is above ``busy_share`` an idle sample starts no streak.
- ``stuck_power_ratio`` (stuck: util busy, power near idle) is off by default (0.0): idle power differs per
  board (about 10-15 % of the limit on A100/H100, 5 % on consumer cards), so a site sets it for its GPUs
  (0.2 suits A100/H100). Per-process SM util does not veto it: NVML's ``smUtil`` has util's blind spot.
  Memory bandwidth at least ``mem_busy_at_least`` (10 %) and GPM SM activity at least ``sm_active_at_least``
  (3 %, Hopper+) confirm work; SM activity under it marks a busy-util GPU stuck without power
  (classify.activity: the one place the signals are combined).
- One condition per (host, GPU, user) for the user's processes holding >= ``min_memory_mib`` each.
  Labels: host, gpu, uuid, user. The pid is an annotation, not a label, so restarting the same notebook
  continues the alert instead of opening a new one (and a new nag).
Zombies are left to the stale rule.

"stale": implemented are (1) a zombie (state Z) still listed on the GPU, and (2) a process re-parented to
init (ppid 1: its session or launcher is gone) that has not used the GPU for ``no_session_idle`` seconds.
"Outlived its job/container" is not implemented, because it cannot be told from what the wire carries:
- ``job`` and ``container`` come from the process's own cgroup path (agent/procinfo.py). A process that
  survives its job (Slurm could not kill it, it sits in D state) keeps that cgroup, so its job id looks the
  same before and after the job ends; only the scheduler or the container runtime knows the job is over, and
  the agent asks neither (no squeue / docker ps per sample, by design).
- The collector sees only processes that hold a GPU context. The job's other processes (slurmstepd, the
  batch shell, srun, the container's init) never appear, so "no other process of job J on the host" is the
  normal state of every single-GPU job. For a multi-GPU job, "its sibling ranks exited" is visible, but rank 0
  legitimately outlives them (saving a checkpoint, evaluating), so that alone would nag healthy jobs.
The cases that matter are caught by other signals: an idle survivor by ``wasted`` (and by reason 2 once its
launcher is gone), a hung rank spinning at 100 % util by wasted's ``stuck`` condition.
Stale labels include the pid: each stale process is its own thing to kill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import allocated_indexes
from gpufleet.collector.model.classify import (
    holders,
    holds_memory,
    is_free,
    is_zombie,
    orphaned_bytes,
    user_of,
)
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule, find_gpu
from gpufleet.collector.rules.wording import (
    DURATION,
    gpu_labels,
    keep_command,
    safe,
    short_command,
    slurm_annotations,
    slurm_note,
)
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_bytes, fmt_duration, fmt_pct


@dataclass(slots=True)
class _Streak:
    low_since: float | None = None  # start of the current idle streak
    busy_since: float | None = None  # start of the current busy run (None: last sample idle)
    stuck: bool = False  # the latest idle sample was "stuck" (busy util, near-idle power)
    busy_share: float = 0.0  # moving average of busy (1) / idle (0) over 5 x spike_tolerance
    seen: float | None = None  # the previous sample


class WastedRule(Rule):
    name = "wasted"
    p: catalog.Wasted
    reads_processes = True

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._streaks: dict[str, dict[str, _Streak]] = {}  # host -> uuid -> streak

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        tolerance = self.p.spike_tolerance
        max_share = self.p.busy_share
        tau = 5 * max(tolerance, 1.0)
        old = self._streaks.get(ctx.name, {})
        streaks = self._streaks[ctx.name] = {}  # GPUs gone from the snapshot drop out
        for gf in self.facts(ctx, snapshot).gpus:
            streak = streaks[gf.gpu.uuid] = old.get(gf.gpu.uuid) or _Streak()
            kind = gf.activity
            if kind is not None:
                dt = min(max(now - streak.seen, 0.0), tau) if streak.seen is not None else 0.0
                weight = 1.0 - math.exp(-dt / tau)
                streak.busy_share += ((kind == "busy") - streak.busy_share) * weight
                streak.seen = now
            if kind is None:
                streak.low_since = streak.busy_since = None
            elif kind != "busy":
                if streak.low_since is None and streak.busy_share <= max_share:
                    streak.low_since = now
                streak.busy_since = None
                streak.stuck = kind == "stuck"
            else:
                if streak.busy_since is None:
                    streak.busy_since = now
                if now - streak.busy_since > tolerance or streak.busy_share > max_share:
                    streak.low_since = None

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        out: list[Condition] = []
        streaks = self._streaks.get(ctx.name, {})
        for gf in self.facts(ctx, ctx.snapshot).gpus:
            g = gf.gpu
            streak = streaks.get(g.uuid)
            if streak is None or streak.low_since is None:
                continue
            for user, procs in sorted(gf.holders.items()):
                out.append(self._condition(ctx.name, g, user, procs, streak.stuck))
        return out

    def _condition(self, host: str, g: sample.GpuSample, user: str,
                   procs: list[sample.ProcessSample], stuck: bool) -> Condition:
        held = sum(p.gpu_memory or 0 for p in procs)
        util = fmt_pct(g.util_gpu, unknown="?")
        if len(procs) == 1:
            p = procs[0]
            who = f"{user}'s {short_command(p.command)} (pid {p.pid}){slurm_note(procs)} holds"
        else:
            listed = ", ".join(f"{short_command(p.command)} pid {p.pid}" for p in procs[:3])
            more = f" and {len(procs) - 3} more" if len(procs) > 3 else ""
            who = f"{user}'s {len(procs)} processes ({listed}{more}){slurm_note(procs)} hold"
        power = ""
        if g.power_draw is not None and g.power_limit:
            power = f", drawing {g.power_draw:.0f} of {g.power_limit:.0f} W"
        labels = {**gpu_labels(host, g), "user": user}
        keep = keep_command(labels, self.name)
        if stuck:
            summary = (f"{who} {fmt_bytes(held)} on {host} GPU {g.index} at {util} util but only "
                       f"{_readings(g)} for {DURATION}: looks stuck (a hung collective?)")
            description = (
                f"The GPU reports {util} util (a kernel is resident) but {self._why_stuck(g)}: it is "
                f"spinning, not computing, as a hung NCCL collective does when a peer rank died. Check the "
                f"job's other ranks and kill it if it is hung, or keep it with `{keep}`."
            )
        else:
            summary = f"{who} {fmt_bytes(held)} on {host} GPU {g.index} at {util} util for {DURATION}"
            description = (
                f"GPU util has stayed under {self.p.util_below} %{power} while the memory is "
                f"held. Free it (exit the notebook or kill the process) so others can use the GPU, or "
                f"keep it with `{keep}`."
            )
        annotations = {
            "pid": ",".join(str(p.pid) for p in procs),
            "command": safe(procs[0].command, 200),
            "memory_bytes": str(held),
            "util": "" if g.util_gpu is None else str(g.util_gpu),
            "reason": "stuck" if stuck else "idle",
        }
        jobs = sorted({p.job for p in procs if p.job} | {p.container for p in procs if p.container})
        if jobs:
            annotations["job"] = ",".join(jobs)
        annotations.update(slurm_annotations(procs))
        return Condition(self.name, labels, summary, description, value=float(held), annotations=annotations)

    def _why_stuck(self, g: sample.GpuSample) -> str:
        """The signals that saw no work on a stuck sample (classify.activity's second opinions)."""
        t = self.thresholds
        why = []
        if t.stuck_power_ratio > 0 and g.power_draw is not None and g.power_limit \
                and g.power_draw / g.power_limit < t.stuck_power_ratio:
            why.append(f"draws under {self.p.stuck_power_ratio} of its power limit")
        if t.sm_active_at_least > 0 and g.sm_active is not None:
            why.append(f"only {g.sm_active} % of its SMs are active (under {t.sm_active_at_least:g} %)")
        if g.util_mem is not None:
            why.append(f"it uses {g.util_mem} % of its memory bandwidth")
        return ", ".join(why) or "the other signals see no work"

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        host, gpu, user = alert.labels.get("host"), alert.labels.get("gpu"), alert.labels.get("user")
        took = fmt_duration(now - alert.started_at)
        g = find_gpu(ctx, alert.labels)
        still = g is not None and user in holders(g, self.thresholds)
        if not still:
            return f"{user} released GPU {gpu} on {host} after {took}"
        util = fmt_pct(None if g is None else g.util_gpu, unknown="?")
        return f"{user}'s work on {host} GPU {gpu} is busy again ({util} util) after {took} idle"

    def forget_host(self, host: str) -> None:
        self._streaks.pop(host, None)


def _readings(g: sample.GpuSample) -> str:
    """What a stuck GPU reads besides util: power, SM activity and memory bandwidth, where reported."""
    parts = []
    if g.power_draw is not None and g.power_limit:
        parts.append(f"{g.power_draw:.0f} of {g.power_limit:.0f} W")
    if g.sm_active is not None:
        parts.append(f"{g.sm_active} % SM activity")
    if g.util_mem is not None:
        parts.append(f"{g.util_mem} % memory bandwidth")
    return ", ".join(parts) or "idle readings"


class IdleRule(Rule):
    """A GPU with no processes, (almost) no memory used and 0 % util, that no running Slurm job holds:
    capacity nobody is using (an allocated GPU nobody uses is ``allocated_unused``'s)."""

    name = "idle"
    reads_processes = True

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        held = allocated_indexes(ctx.snapshot) if ctx.snapshot is not None else frozenset()

        def judge(g: sample.GpuSample) -> Condition | None:
            if not is_free(g, self.thresholds, g.index in held):  # a Slurm job's GPU is not capacity
                return None
            name = f" ({g.name})" if g.name else ""
            return Condition(self.name, gpu_labels(ctx.name, g),
                             f"{ctx.name} GPU {g.index}{name} idle for {DURATION}: no processes, 0 % util",
                             "Nothing has been allocated on this GPU; it is free capacity.", value=0.0)

        return self.each_gpu(ctx, judge)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        g = find_gpu(ctx, alert.labels)
        host, gpu = alert.labels.get("host"), alert.labels.get("gpu")
        users = sorted({user_of(p) for p in g.processes}) if g is not None else []
        by = f" by {', '.join(users)}" if users else ""
        return f"{host} GPU {gpu} in use again{by} after {fmt_duration(now - alert.started_at)} idle"


class StaleRule(Rule):
    name = "stale"
    p: catalog.Stale
    reads_processes = True

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        # host -> (uuid, pid, start_time) -> when the orphaned process was last seen using the GPU
        self._unused_since: dict[str, dict[tuple[str, int, float | None], float]] = {}

    def _used(self, g: sample.GpuSample, p: sample.ProcessSample) -> bool:
        if p.sm_util is not None:
            return p.sm_util > 0
        if g.util_gpu is None:
            return True  # cannot tell: never call it unused
        return g.util_gpu >= self.p.util_below

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        old = self._unused_since.get(ctx.name, {})
        unused = self._unused_since[ctx.name] = {}  # processes gone from the snapshot drop out
        for g in snapshot.gpus:
            for p in g.processes:
                if p.ppid != 1:
                    continue
                key = (g.uuid, p.pid, p.start_time)
                unused[key] = now if self._used(g, p) else old.get(key, now)

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        idle_needed = self.p.no_session_idle
        out: list[Condition] = []
        unused_since = self._unused_since.get(ctx.name, {})
        for g in ctx.snapshot.gpus:
            for p in g.processes:
                if is_zombie(p) and holds_memory(p):
                    who = self._who(ctx.name, g, p)
                    out.append(self._cond(ctx.name, g, p, "zombie", f"{who} is a zombie {_holding(p)}",
                                          "The process exited but was not reaped; the GPU memory stays "
                                          "allocated until its parent reaps it or is killed."))
                    continue
                if p.ppid != 1:
                    continue
                since = unused_since.get((g.uuid, p.pid, p.start_time))
                if since is not None and now - since >= idle_needed:
                    out.append(self._cond(
                        ctx.name, g, p, "orphaned",
                        f"{self._who(ctx.name, g, p)} lost its session (parent is init) and has not used the "
                        f"GPU for {fmt_duration(now - since)}, {_holding(p)}",
                        "Its launching shell or job step is gone; it is most likely forgotten.",
                    ))
        return out

    @staticmethod
    def _who(host: str, g: sample.GpuSample, p: sample.ProcessSample) -> str:
        return f"{user_of(p)}'s {short_command(p.command)} (pid {p.pid}) on {host} GPU {g.index}"

    def _cond(self, host: str, g: sample.GpuSample, p: sample.ProcessSample, reason: str, summary: str,
              description: str) -> Condition:
        labels = {**gpu_labels(host, g), "user": user_of(p), "pid": str(p.pid)}
        annotations = {"reason": reason, "command": safe(p.command, 200),
                       "memory_bytes": "" if p.gpu_memory is None else str(p.gpu_memory)}
        if p.start_time is not None:
            annotations["process_start"] = f"{p.start_time:.0f}"
        annotations.update(slurm_annotations([p]))
        return Condition(self.name, labels, summary, description,
                         value=None if p.gpu_memory is None else float(p.gpu_memory), annotations=annotations)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        host, gpu, pid = alert.labels.get("host"), alert.labels.get("gpu"), alert.labels.get("pid")
        g = find_gpu(ctx, alert.labels)
        gone = g is None or all(str(p.pid) != pid for p in g.processes)
        what = "is gone" if gone else "is no longer stale"
        return f"pid {pid} of {alert.labels.get('user')} on {host} GPU {gpu} {what}"

    def restore(self, alert: AlertRecord) -> None:
        if alert.annotations.get("reason") != "orphaned":
            return
        try:
            pid = int(alert.labels.get("pid", ""))
            start = alert.annotations.get("process_start")
            start_time = float(start) if start else None
        except ValueError:
            return
        key = (alert.labels.get("uuid", ""), pid, start_time)
        self._unused_since.setdefault(alert.labels.get("host", ""), {}).setdefault(
            key, alert.started_at - self.p.no_session_idle)

    def forget_host(self, host: str) -> None:
        self._unused_since.pop(host, None)


def _holding(p: sample.ProcessSample) -> str:
    return f"holding {fmt_bytes(p.gpu_memory)}" if p.gpu_memory else "holding a GPU context"


class OrphanedMemoryRule(Rule):
    """Memory in use with no process visible: a leaked context, or processes in a PID namespace we cannot see.

    MIG GPUs are skipped (their memory is accounted per instance and processes may not be listed per GPU).
    """

    name = "orphaned_memory"
    reads_processes = True

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        def judge(g: sample.GpuSample) -> Condition | None:
            orphan = orphaned_bytes(g, self.thresholds)  # no process is listed: none of it is accounted for
            if orphan is None:
                return None
            return Condition(
                self.name, gpu_labels(ctx.name, g),
                f"{ctx.name} GPU {g.index} has {fmt_bytes(orphan)} in use with no process visible "
                f"for {DURATION}",
                "Memory is held by a process the agent cannot see (another PID namespace: run the agent "
                "with the host PID namespace) or by a context leaked after a crash (a GPU reset frees it).",
                value=float(orphan), annotations={"memory_bytes": str(orphan)})

        return self.each_gpu(ctx, judge)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        g = find_gpu(ctx, alert.labels)
        host, gpu = alert.labels.get("host"), alert.labels.get("gpu")
        if g is not None and g.processes:
            return f"{host} GPU {gpu}: processes visible again"
        used = fmt_bytes(g.memory_used) if g is not None else "?"
        return f"{host} GPU {gpu} memory released (now {used} used)"
