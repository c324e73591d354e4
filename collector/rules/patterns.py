"""Diagnoses people make by reading nvidia-smi's util and memory columns, made automatic: each rule names
the pattern and says what to check.

- ``underused``: a process's mean GPU util over ``window`` (30 min) stays under ``util_below`` (30 %) while
  it holds the GPU, but is not idle (under wasted's util_below the ``wasted`` rule speaks). Info, addressed
  to the user (USER_RULES); one alert per process (pid + start time), one note per process per
  ``note_once_per`` (a day, alerts/notes.py).
- ``input_bound``: util swings between above ``high_above`` and under ``low_below`` at least
  ``min_swings_per_minute`` times a minute over ``window`` while memory stays steady (within
  ``memory_steady_pct`` of the total): the GPU waits for the CPU between batches.
- ``near_oom``: memory used at least ``memory_at_least_pct`` of the total: the next larger batch fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.agent import wire
from gpufleet.collector.classify import holders, user_of
from gpufleet.collector.rules.base import (
    DURATION,
    Condition,
    HostContext,
    Rule,
    gpu_labels,
    safe,
    short_command,
)
from gpufleet.collector.rules.series import Window
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_bytes, fmt_duration

ProcKey = tuple[int, float | None]  # pid, start time


@dataclass(slots=True)
class _ProcTrack:
    window: Window[float]  # mean util of the GPUs the process holds, per sample
    gpu: wire.GpuSample  # the first GPU it holds, latest sample
    proc: wire.ProcessSample


class UnderusedRule(Rule):
    name = "underused"

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._procs: dict[str, dict[ProcKey, _ProcTrack]] = {}  # host -> process -> track

    def observe_snapshot(self, ctx: HostContext, snapshot: wire.Snapshot, now: float) -> None:
        span = self.param_float("window", 1800.0)
        old = self._procs.get(ctx.name, {})
        procs = self._procs[ctx.name] = {}  # processes gone from the snapshot drop out
        utils: dict[ProcKey, list[float]] = {}
        for g in snapshot.gpus:
            if g.error or g.util_gpu is None:
                continue
            for plist in holders(g, self.thresholds).values():
                for p in plist:
                    key = (p.pid, p.start_time)
                    utils.setdefault(key, []).append(float(g.util_gpu))
                    if key not in procs:
                        track = old.get(key) or _ProcTrack(Window(span), g, p)
                        track.gpu, track.proc = g, p
                        procs[key] = track
        for key, values in utils.items():
            procs[key].window.add(now, sum(values) / len(values))

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        below = self.param_float("util_below", 30.0)
        idle_below = self.thresholds.util_below  # under this the GPU is idle: the wasted rule's case
        out: list[Condition] = []
        for track in self._procs.get(ctx.name, {}).values():
            if not track.window.full():
                continue
            values = list(track.window.values())
            mean = sum(values) / len(values)
            if idle_below <= mean < below:
                out.append(self._condition(ctx.name, track, mean))
        return out

    def _condition(self, host: str, track: _ProcTrack, mean: float) -> Condition:
        g, p = track.gpu, track.proc
        user = user_of(p)
        labels = {**gpu_labels(host, g), "user": user, "pid": str(p.pid)}
        span = fmt_duration(self.param_float("window", 1800.0))
        summary = (f"{user}'s {short_command(p.command)} (pid {p.pid}) on {host} GPU {g.index} averages "
                   f"{mean:.0f} % GPU util over {span}: the GPU is underused")
        description = (
            f"The job holds {fmt_bytes(p.gpu_memory)} of the GPU but keeps it busy only {mean:.0f} % of the "
            f"time (under {self.param_float('util_below', 30.0):.0f} %). What to check: the input pipeline "
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
        return Condition(self.name, labels, summary, description, value=mean, annotations=annotations)

    def forget_host(self, host: str) -> None:
        self._procs.pop(host, None)


@dataclass(slots=True)
class _GpuTrack:
    window: Window[tuple[int, int | None]]  # (util, memory used)


def count_swings(utils: list[int], high_above: float, low_below: float) -> int:
    """Moves between the two bands (above ``high_above`` <-> under ``low_below``); values between the bands
    leave the side unchanged, so noise around one threshold is not a swing."""
    side: str | None = None
    swings = 0
    for u in utils:
        now = "high" if u > high_above else "low" if u < low_below else side
        if now is not None and side is not None and now != side:
            swings += 1
        side = now
    return swings


class InputBoundRule(Rule):
    name = "input_bound"

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._gpus: dict[str, dict[str, _GpuTrack]] = {}  # host -> uuid -> track

    def observe_snapshot(self, ctx: HostContext, snapshot: wire.Snapshot, now: float) -> None:
        span = self.param_float("window", 120.0)
        old = self._gpus.get(ctx.name, {})
        tracks = self._gpus[ctx.name] = {}
        for g in snapshot.gpus:
            if g.error or g.util_gpu is None:
                continue  # an unreadable sample ends the series: the pattern must be seen unbroken
            track = tracks[g.uuid] = old.get(g.uuid) or _GpuTrack(Window(span))
            track.window.add(now, (g.util_gpu, g.memory_used))

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        out: list[Condition] = []
        tracks = self._gpus.get(ctx.name, {})
        for g in ctx.snapshot.gpus:
            track = tracks.get(g.uuid)
            if track is None or not track.window.full():
                continue
            held = holders(g, self.thresholds)
            if not held:
                continue
            found = self._sawtooth(g, track)
            if found is None:
                continue
            per_minute, spread = found
            for user, procs in sorted(held.items()):
                out.append(self._condition(ctx.name, g, user, procs, per_minute, spread))
        return out

    def _sawtooth(self, g: wire.GpuSample, track: _GpuTrack) -> tuple[float, int] | None:
        """(swings per minute, memory spread in bytes) when the window shows the pattern, else None."""
        points = list(track.window.values())
        swings = count_swings([u for u, _ in points], self.param_float("high_above", 70.0),
                              self.param_float("low_below", 20.0))
        per_minute = swings * 60.0 / max(track.window.covered(), 1.0)
        if per_minute < self.param_float("min_swings_per_minute", 4.0):
            return None
        mems = [m for _, m in points if m is not None]
        if not mems:
            return None
        spread = max(mems) - min(mems)
        total = g.memory_total or max(mems)
        if total <= 0 or spread > total * self.param_float("memory_steady_pct", 5.0) / 100.0:
            return None  # memory moves with util: phases of different work (evaluation), not starvation
        return per_minute, spread

    def _condition(self, host: str, g: wire.GpuSample, user: str, procs: list[wire.ProcessSample],
                   per_minute: float, spread: int) -> Condition:
        p = procs[0]
        high, low = self.param_float("high_above", 70.0), self.param_float("low_below", 20.0)
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


class NearOomRule(Rule):
    name = "near_oom"

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        at_least = self.param_float("memory_at_least_pct", 95.0)
        out: list[Condition] = []
        for g in ctx.snapshot.gpus:
            if g.error or g.memory_used is None or not g.memory_total:
                continue
            pct = 100.0 * g.memory_used / g.memory_total
            if pct < at_least:
                continue
            for user, procs in sorted(holders(g, self.thresholds).items()):
                out.append(self._condition(ctx.name, g, user, procs, pct))
        return out

    def _condition(self, host: str, g: wire.GpuSample, user: str, procs: list[wire.ProcessSample],
                   pct: float) -> Condition:
        p = procs[0]
        free = (g.memory_total or 0) - (g.memory_used or 0)
        summary = (f"{user}'s {short_command(p.command)} (pid {p.pid}) on {host} GPU {g.index}: memory "
                   f"{fmt_bytes(g.memory_used)} of {fmt_bytes(g.memory_total)} ({pct:.0f} %) for {DURATION}, "
                   f"{fmt_bytes(max(free, 0))} free: near out of memory")
        description = (
            "The GPU's memory is almost full: a larger batch, a longer sequence or a memory spike in the "
            "next step will fail with CUDA out of memory. What to check: reduce the batch size (keep the "
            "effective batch with gradient accumulation), enable gradient (activation) checkpointing, use "
            "mixed precision (bf16/fp16), set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
            "fragmentation, or check for tensors kept alive across steps (a growing loss history on the GPU)."
        )
        labels = {**gpu_labels(host, g), "user": user}
        annotations = {"pid": ",".join(str(q.pid) for q in procs), "command": safe(p.command, 200),
                       "memory_pct": f"{pct:.1f}", "memory_bytes": str(g.memory_used or 0)}
        return Condition(self.name, labels, summary, description, value=pct, annotations=annotations)
