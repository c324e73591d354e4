"""The human-readable table ``gpufleet-agent --once`` prints: one screen, no dependencies (no rich here).

Its units are the collector's views' (issue 36): ``40/48G``, ``41°C``, ``3h00m``; lines fit the terminal's
width (a command is cut at the edge, a note wraps between words), and a pipe gets them whole.
"""

from __future__ import annotations

import shutil
import textwrap
import time
from typing import IO

from gpufleet.agent.wire import GpuSample, Hello, ProcessSample, Snapshot

GIB = float(1 << 30)


def _gib(value: int | None) -> str:
    """``40G``, ``1.2G`` (one decimal under 10 GiB), ``-``."""
    if value is None:
        return "-"
    g = value / GIB
    return f"{g:.1f}G" if g < 10 else f"{g:.0f}G"


def _pair(used: int | None, total: int | None) -> str:
    """``40/48G``, one decimal on cards under 10 GiB: the collector's status view writes them so."""
    if total is not None and total < 10 * GIB:
        return f"{(used or 0) / GIB:.1f}/{total / GIB:.0f}G"
    u = "?" if used is None else f"{used / GIB:.0f}"
    t = "?" if total is None else f"{total / GIB:.0f}"
    return f"{u}/{t}G"


def terminal_width(stream: IO[bytes]) -> int | None:
    """The terminal's width when ``stream`` is one, else None (a pipe: lines whole)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((80, 24)).columns if tty else None


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def _cuda(version: int | None) -> str:
    return "-" if version is None else f"{version // 1000}.{version % 1000 // 10}"


def _num(value: float | int | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.0f}{unit}"


def _flags(g: GpuSample) -> str:
    flags = [r for r in g.throttle_reasons or [] if r != "gpu_idle"]
    if g.ecc_uncorrected:
        flags.append(f"ecc_uncorrected={g.ecc_uncorrected}")
    if g.mig_mode:
        flags.append(f"mig:{len(g.mig_instances)}")
    if g.recovery_action and g.recovery_action != "none":
        flags.append(f"recovery={g.recovery_action}")
    if g.remap_failed:
        flags.append("row_remap_failed")
    elif g.remap_pending:
        flags.append("row_remap_pending")
    return ",".join(flags)


UNATTRIBUTED = "(unattributed: its /proc entry is not readable, or it just exited)"
NO_PID_NAMESPACE = "(unattributed: pid not in this /proc; run the agent in the host PID namespace)"
PROCESS_HEADER = f"     {'PID':>8}  {'USER':<10} {'GMEM':>5}  {'SM':>4}  {'TIME':>6}  S  COMMAND"


def _process_line(p: ProcessSample, now: float, unattributed: str = UNATTRIBUTED) -> str:
    if not p.attributed:
        who, age, state, cmd = "?", "-", "?", unattributed
    else:
        who = p.user or "?"
        age = "-" if p.start_time is None else _duration(now - p.start_time)
        state = p.state or "?"
        cmd = p.command or ""
        if state == "Z":
            cmd += " <defunct>"
    where = f" job={p.job}" if p.job else ""
    if p.container:
        where += f" ctr={p.container[:12]}"
    if p.pod:
        where += f" pod={p.pod[:8]}"
    sm = "-" if p.sm_util is None else f"{p.sm_util}%"
    return f"     {p.pid:>8}  {who:<10.10} {_gib(p.gpu_memory):>5}  {sm:>4}  {age:>6}  {state}  {cmd}{where}"


def _fit(line: str, width: int | None) -> list[str]:
    """A table line cut at the edge (its command), or a sentence wrapped between words."""
    if width is None or len(line) <= width:
        return [line]
    if line.startswith(("note:", "     (")):
        return textwrap.wrap(line, width, subsequent_indent="      ", break_on_hyphens=False)
    return [line[: max(width - 1, 0)] + "…"]


def render(snapshot: Snapshot, hello: Hello | None = None, now: float | None = None,
           width: int | None = None) -> str:
    """One line per GPU (nvidia-smi's readings, gpustat's density), its MIG instances, then its processes;
    at most ``width`` cells a line (None: no limit)."""
    return "\n".join(out for line in _lines(snapshot, hello, now) for out in _fit(line, width)) + "\n"


def _lines(snapshot: Snapshot, hello: Hello | None, now: float | None) -> list[str]:
    now = time.time() if now is None else now
    lines = []
    unattributed = UNATTRIBUTED
    if hello is not None:
        lines.append(
            f"{hello.hostname}  driver {hello.driver_version or '-'}  CUDA {_cuda(hello.cuda_version)}  "
            f"backend {hello.backend}  {len(snapshot.gpus)} GPU(s)"
        )
        if hello.pid_namespace_ok is False:
            unattributed = NO_PID_NAMESPACE
            lines.append(
                "note: no GPU process pid exists in this /proc: the agent runs in another PID namespace "
                "(container without --pid=host / hostPID: true), so users and commands are unknown"
            )
    width = min(40, max([len(g.name or "?") for g in snapshot.gpus] + [len("NAME")]))
    lines.append(
        f"{'GPU':>3}  {'NAME':<{width}} {'UTIL':>5}  {'MEMORY':>13}  {'TEMP':>5}  {'POWER':>10}  "
        f"{'FAN':>4}  FLAGS"
    )
    for g in snapshot.gpus:
        name = f"{(g.name or '?'):<{width}.{width}}"
        if g.error:
            lines.append(f"{g.index:>3}  {name} {g.error}")
            continue
        mem = _pair(g.memory_used, g.memory_total)
        power = f"{_num(g.power_draw)}/{_num(g.power_limit)}W"
        lines.append(
            f"{g.index:>3}  {name} {_num(g.util_gpu, '%'):>5}  {mem:>13}  "
            f"{_num(g.temperature, '°C'):>5}  {power:>10}  {_num(g.fan_speed, '%'):>4}  {_flags(g)}".rstrip()
        )
        if g.read_errors:
            errors = sorted(g.read_errors.items())
            failed = ", ".join(f"{k} ({v.removeprefix('NVML_ERROR_')})" for k, v in errors)
            lines.append(f"     not read: {failed}")
        for m in g.mig_instances:
            lines.append(
                f"     MIG gi={m.gi_id} ci={m.ci_id if m.ci_id is not None else '-'} {m.profile or ''}  "
                f"{_pair(m.memory_used, m.memory_total)}  {m.uuid or ''}"
            )
        if g.processes:
            lines.append(PROCESS_HEADER)
        for p in sorted(g.processes, key=lambda p: -(p.gpu_memory or 0)):
            lines.append(_process_line(p, now, unattributed))
        if g.processes_error:
            lines.append(f"     (process list not readable: {g.processes_error})")
        elif not g.processes:
            lines.append("     (no processes)")
    return lines
