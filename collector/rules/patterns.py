"""Diagnoses people make by reading nvidia-smi's util and memory columns, made automatic: each rule names
the pattern and says what to check.

- ``underused``: a process's mean GPU util over ``window`` (30 min) stays under ``util_below`` (30 %) while
  it holds the GPU, but is not idle (under wasted's util_below the ``wasted`` rule speaks). Info, addressed
  to the user (USER_RULES); one alert per process (pid + start time), one note per process per
  ``note_once_per`` (a day, alerts/notes.py).
- ``input_bound``: util swings between above ``high_above`` and under ``low_below`` at least
  ``min_swings_per_minute`` times a minute over ``window`` while memory stays steady (within
  ``memory_steady_pct`` of the total): the GPU waits for the CPU between batches.
- ``near_oom``: memory used at least ``memory_at_least_pct`` of the total: the next larger batch fails; or
  a crash loop: at least ``restarts_at_least`` of a user's processes reached that share and left the GPU
  within ``restart_window`` (the job restarts what ran out of memory; the condition holds between runs).
  NVML does not say why a process ended, so two short jobs that each fill the GPU and finish count too;
  frameworks that preallocate (TensorFlow, JAX) look full: the description says how to turn that off.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpufleet.collector.model import sample
from gpufleet.collector.model.classify import holders, is_zombie, user_of
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.series import Window, WindowMean
from gpufleet.collector.rules.wording import DURATION, gpu_labels, safe, short_command, slurm_annotations
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_bytes, fmt_duration

ProcKey = tuple[int, float | None]  # pid, start time
_NAN = float("nan")


@dataclass(slots=True)
class _Series:
    """The per-sample util of processes first seen together on one GPU and holding only it ever since: they
    have been given the same values, so one mean serves them all (8 processes on a GPU cost one add a
    sample, not eight). ``gpu`` None: one process's own (it held several GPUs or moved), never shared."""

    util: WindowMean
    gpu: str | None  # the uuid whose util it takes
    fed: object = None  # the observe call that added this sample's value (once, however many share it)

    def own(self) -> _Series:
        """A copy for one process whose values part from the others' from this sample on."""
        return _Series(self.util.copy(), None)


@dataclass(slots=True)
class _ProcTrack:
    series: _Series  # mean util of the GPUs the process holds, per sample
    gpu: sample.GpuSample  # the first GPU it holds, latest sample
    proc: sample.ProcessSample


@dataclass(slots=True)
class _HostTracks:
    """One host's processes and the means they feed, as its last snapshot with changed processes left them:
    while the same GPUs (judged: no error, a util) keep the same processes, a sample only adds each mean's
    value (its GPU's util, or the mean of its GPUs' when a process holds several)."""

    procs: dict[ProcKey, _ProcTrack] = field(default_factory=dict)
    judged: list[int] = field(default_factory=list)  # positions of the judged GPUs in the snapshot
    rosters: list[object] = field(default_factory=list)  # their facts rosters
    feeds: list[tuple[WindowMean, list[int]]] = field(default_factory=list)  # mean, its GPUs' positions


class UnderusedRule(Rule):
    name = "underused"
    p: catalog.Underused
    reads_processes = True

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._hosts: dict[str, _HostTracks] = {}  # host -> its processes' tracks

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        gpus = self.facts(ctx, snapshot).gpus
        judged = [i for i, gf in enumerate(gpus) if not gf.gpu.error and gf.gpu.util_gpu is not None]
        old = self._hosts.get(ctx.name)
        if old is not None and old.judged == judged and all(
                gpus[i].roster is roster for i, roster in zip(judged, old.rosters, strict=True)):
            for mean, at in old.feeds:  # the same processes on the same GPUs: one value a mean
                if len(at) == 1:
                    mean.add(now, float(gpus[at[0]].gpu.util_gpu or 0))  # judged: never None
                else:
                    utils = [float(gpus[i].gpu.util_gpu or 0) for i in at]
                    mean.add(now, sum(utils) / len(utils))
            return
        span = self.p.window
        before = old.procs if old is not None else {}
        host = self._hosts[ctx.name] = _HostTracks(judged=judged, rosters=[gpus[i].roster for i in judged])
        procs = host.procs  # processes gone from the snapshot drop out
        # each process's util this sample: its GPU's, or the mean of its GPUs' when it holds several (rare:
        # a list is made only then). A process whose value parts from its series' takes its own copy here,
        # before any value of this sample is added.
        first: dict[ProcKey, float] = {}
        several: dict[ProcKey, list[float]] = {}
        where: dict[ProcKey, list[int]] = {}
        for i in judged:
            gf = gpus[i]
            g = gf.gpu
            util = float(g.util_gpu or 0)  # judged: never None
            newcomers: _Series | None = None  # the series of the processes first seen now on this GPU
            for plist in gf.holders.values():
                for p in plist:
                    key = (p.pid, p.start_time)
                    seen = first.get(key)
                    if seen is not None:
                        several.setdefault(key, [seen]).append(util)
                        where[key].append(i)
                        held = procs[key]
                        if held.series.gpu is not None:
                            held.series = held.series.own()
                        continue
                    first[key] = util
                    where[key] = [i]
                    track = before.get(key)
                    if track is None:
                        if newcomers is None:
                            newcomers = _Series(WindowMean(span), g.uuid)
                        track = _ProcTrack(newcomers, g, p)
                    else:
                        track.gpu, track.proc = g, p  # the first GPU it holds, as listed
                        if track.series.gpu is not None and track.series.gpu != g.uuid:
                            track.series = track.series.own()
                    procs[key] = track
        this_sample = object()
        for key, track in procs.items():
            series = track.series
            if series.fed is this_sample:
                continue
            series.fed = this_sample
            shared = several.get(key)
            series.util.add(now, first[key] if shared is None else sum(shared) / len(shared))
            host.feeds.append((series.util, where[key]))

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        below = self.p.util_below
        idle_below = self.thresholds.util_below  # under this the GPU is idle: the wasted rule's case
        host = self._hosts.get(ctx.name)
        if host is None:
            return []
        verdicts: dict[int, float | None] = {}  # id(mean) -> the mean when full, else None: once per series
        for util, _ in host.feeds:
            verdicts[id(util)] = util.mean() if util.full() else None
        if not any(mean is not None and idle_below <= mean < below for mean in verdicts.values()):
            return []
        out: list[Condition] = []
        for track in host.procs.values():
            mean = verdicts[id(track.series.util)]
            if mean is not None and idle_below <= mean < below:
                out.append(self._condition(ctx.name, track, mean))
        return out

    def _condition(self, host: str, track: _ProcTrack, mean: float) -> Condition:
        g, p = track.gpu, track.proc
        user = user_of(p)
        labels = {**gpu_labels(host, g), "user": user, "pid": str(p.pid)}
        span = fmt_duration(self.p.window)
        summary = (f"{user}'s {short_command(p.command)} (pid {p.pid}) on {host} GPU {g.index} averages "
                   f"{mean:.0f} % GPU util over {span}: the GPU is underused")
        description = (
            f"The job holds {fmt_bytes(p.gpu_memory)} of the GPU but keeps it busy only {mean:.0f} % of the "
            f"time (under {self.p.util_below:.0f} %). What to check: the input pipeline "
            f"(DataLoader num_workers, pin_memory, data on a slow filesystem), a batch size too small for "
            f"this GPU, CPU-side work between steps (logging, metrics, checkpointing); or run it on a "
            f"smaller GPU or a MIG slice and leave this one to a job that fills it."
        )
        annotations = {"command": safe(p.command, 200), "mean_util": f"{mean:.1f}",
                       "memory_bytes": "" if p.gpu_memory is None else str(p.gpu_memory)}
        if p.start_time is not None:
            annotations["process_start"] = f"{p.start_time:.0f}"
        if p.job or p.container:
            annotations["job"] = p.job or p.container or ""
        annotations.update(slurm_annotations([p]))
        return Condition(self.name, labels, summary, description, value=mean, annotations=annotations)

    def note_once_per(self) -> float | None:
        return self.p.note_once_per

    def forget_host(self, host: str) -> None:
        self._hosts.pop(host, None)


def _memory_window(span: float) -> Window[float]:
    """A GPU's memory used per sample, as doubles (NaN: not reported; bytes are exact under 2**53)."""
    return Window(span, typecode="d")


@dataclass(slots=True)
class _GpuTrack:
    window: Window[float]  # memory used per sample (NaN: not reported); util swings are counted as they come
    side: str | None = None  # the band of the latest sample that was in one: high | low
    #: when util moved from one band to the other (above high_above <-> under low_below); values between
    #: the bands keep the side, so noise around one threshold is not a swing
    swings: deque[float] = field(default_factory=deque)

    def add(self, ts: float, util: int, memory: int | None, high_above: float, low_below: float) -> None:
        if self.window.add(ts, _NAN if memory is None else float(memory)) is None:
            return
        side = "high" if util > high_above else "low" if util < low_below else self.side
        if side is not None and self.side is not None and side != self.side:
            self.swings.append(ts)
        self.side = side
        while self.swings and self.swings[0] < ts - self.window.span:
            self.swings.popleft()


class InputBoundRule(Rule):
    name = "input_bound"
    p: catalog.InputBound

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._gpus: dict[str, dict[str, _GpuTrack]] = {}  # host -> uuid -> track

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        span = self.p.window
        high, low = self.p.high_above, self.p.low_below
        old = self._gpus.get(ctx.name, {})
        tracks = self._gpus[ctx.name] = {}
        for g in snapshot.gpus:
            if g.error or g.util_gpu is None:
                continue  # an unreadable sample ends the series: the pattern must be seen unbroken
            track = tracks[g.uuid] = old.get(g.uuid) or _GpuTrack(_memory_window(span))
            track.add(now, g.util_gpu, g.memory_used, high, low)

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        out: list[Condition] = []
        tracks = self._gpus.get(ctx.name, {})
        for g in ctx.snapshot.gpus:
            track = tracks.get(g.uuid)
            if track is None or not track.window.full():
                continue
            found = self._sawtooth(g, track)
            if found is None:
                continue
            held = holders(g, self.thresholds)
            per_minute, spread = found
            for user, procs in sorted(held.items()):
                out.append(self._condition(ctx.name, g, user, procs, per_minute, spread))
        return out

    def _sawtooth(self, g: sample.GpuSample, track: _GpuTrack) -> tuple[float, int] | None:
        """(swings per minute, memory spread in bytes) when the window shows the pattern, else None."""
        per_minute = len(track.swings) * 60.0 / max(track.window.covered(), 1.0)
        if per_minute < self.p.min_swings_per_minute:
            return None
        mems = [m for m in track.window.values() if m == m]  # only once the util saws; NaN: not reported
        if not mems:
            return None
        spread = int(max(mems) - min(mems))
        total = g.memory_total or max(mems)
        if total <= 0 or spread > total * self.p.memory_steady_pct / 100.0:
            return None  # memory moves with util: phases of different work (evaluation), not starvation
        return per_minute, spread

    def _condition(self, host: str, g: sample.GpuSample, user: str, procs: list[sample.ProcessSample],
                   per_minute: float, spread: int) -> Condition:
        p = procs[0]
        high, low = self.p.high_above, self.p.low_below
        summary = (f"{user}'s {short_command(p.command)} (pid {p.pid}) on {host} GPU {g.index} swings "
                   f"between over {high:.0f} % and under {low:.0f} % util {per_minute:.0f} times a minute "
                   f"for {DURATION}: input-bound")
        description = (
            f"GPU util saws up and down while memory stays flat (within {fmt_bytes(spread)}): the GPU "
            f"finishes each batch and then waits for the next one. What to check: the input pipeline is too "
            f"slow for the GPU. Raise DataLoader num_workers (about the CPU cores per GPU), set "
            f"pin_memory=True and persistent_workers=True, prefetch (prefetch_factor), move decoding and "
            f"augmentation to the GPU (DALI, torchvision.transforms.v2 on tensors), or read from faster "
            f"storage."
        )
        labels = {**gpu_labels(host, g), "user": user}
        annotations = {"pid": ",".join(str(q.pid) for q in procs), "command": safe(p.command, 200),
                       "swings_per_minute": f"{per_minute:.1f}"}
        return Condition(self.name, labels, summary, description, value=per_minute, annotations=annotations)

    def forget_host(self, host: str) -> None:
        self._gpus.pop(host, None)


@dataclass(slots=True)
class _OomTrack:
    peaked: dict[ProcKey, str] = field(default_factory=dict)  # processes that reached the limit -> user
    deaths: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=64))  # (when, user)


class NearOomRule(Rule):
    name = "near_oom"
    p: catalog.NearOom

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._gpus: dict[str, dict[str, _OomTrack]] = {}  # host -> uuid -> track

    @staticmethod
    def _pct(g: sample.GpuSample) -> float | None:
        if g.error or g.memory_used is None or not g.memory_total:
            return None
        return 100.0 * g.memory_used / g.memory_total

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        """Crash loops: a process that reached the limit and left the GPU is a death at the limit."""
        at_least = self.p.memory_at_least_pct
        horizon = now - self.p.restart_window
        old = self._gpus.get(ctx.name, {})
        tracks = self._gpus[ctx.name] = {}
        for g in snapshot.gpus:
            track = tracks[g.uuid] = old.get(g.uuid) or _OomTrack()
            pct = self._pct(g)
            if pct is None or (pct < at_least and not track.peaked and not track.deaths):
                continue  # an unreadable sample says nothing about who left; or nothing to follow
            present = {(p.pid, p.start_time) for p in g.processes if not is_zombie(p)}
            for key, user in track.peaked.items():
                if key not in present:
                    track.deaths.append((now, user))
            track.peaked = {k: u for k, u in track.peaked.items() if k in present}
            if pct >= at_least:
                for user, procs in holders(g, self.thresholds).items():
                    track.peaked.update({(p.pid, p.start_time): user for p in procs})
            while track.deaths and track.deaths[0][0] < horizon:
                track.deaths.popleft()

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        at_least = self.p.memory_at_least_pct
        loops = self.p.restarts_at_least
        tracks = self._gpus.get(ctx.name, {})
        out: list[Condition] = []
        for g in ctx.snapshot.gpus:
            pct = self._pct(g)
            if pct is None:
                continue
            track = tracks.get(g.uuid)
            if pct < at_least and (track is None or not track.deaths):
                continue
            held = holders(g, self.thresholds)
            dead: dict[str, int] = {}
            for _, user in track.deaths if track is not None else ():
                dead[user] = dead.get(user, 0) + 1
            # a crash loop holds between two runs too (nothing on the GPU while the job restarts)
            for user in sorted(set(held) | {u for u, n in dead.items() if loops > 0 and n >= loops}):
                full = pct >= at_least and user in held
                if full or (loops > 0 and dead.get(user, 0) >= loops):
                    out.append(self._condition(ctx.name, g, user, held.get(user, []), pct, dead.get(user, 0),
                                               full))
        return out

    def _condition(self, host: str, g: sample.GpuSample, user: str, procs: list[sample.ProcessSample],
                   pct: float, deaths: int, full: bool) -> Condition:
        p = procs[0] if procs else None
        free = (g.memory_total or 0) - (g.memory_used or 0)
        what = f"{short_command(p.command)} (pid {p.pid})" if p is not None else "job"
        where = f"{user}'s {what} on {host} GPU {g.index}"
        window = fmt_duration(self.p.restart_window)
        restarts = f"; {deaths} of their processes filled it and died in {window}" if deaths else ""
        if full:
            summary = (f"{where}: memory {fmt_bytes(g.memory_used)} of {fmt_bytes(g.memory_total)} "
                       f"({pct:.0f} %) for {DURATION}, {fmt_bytes(max(free, 0))} free: near out of memory"
                       f"{restarts}")
        else:
            summary = (f"{where}: {deaths} processes grew to the memory limit and died in {window}: out of "
                       f"memory in a loop")
        description = (
            ("The GPU's memory is almost full: a larger batch, a longer sequence or a memory spike in the "
             "next step will fail with CUDA out of memory." if full else
             "Processes of this job keep growing to the GPU's memory limit and dying (CUDA out of memory), "
             "and the job restarts them.") + " What to check: reduce the batch size (keep the "
            "effective batch with gradient accumulation), enable gradient (activation) checkpointing, use "
            "mixed precision (bf16/fp16), set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
            "fragmentation, or check for tensors kept alive across steps (a growing loss history on the "
            "GPU). "
            "TensorFlow and JAX reserve the memory up front: TF_FORCE_GPU_ALLOW_GROWTH=true or "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false show what the job really uses."
        )
        labels = {**gpu_labels(host, g), "user": user}
        annotations = {"pid": ",".join(str(q.pid) for q in procs),
                       "command": safe(p.command if p is not None else None, 200),
                       "memory_pct": f"{pct:.1f}", "memory_bytes": str(g.memory_used or 0),
                       "reason": "full" if full else "restarts", "deaths_at_limit": str(deaths)}
        return Condition(self.name, labels, summary, description, value=pct, annotations=annotations)
