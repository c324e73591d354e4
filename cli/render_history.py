"""``gpufleet history``: per-GPU sparklines of util and memory, a summary, the processes that ran; CSV export.

Points are bucketed by *time* across the requested range (not by index), so a gap where the host was down
shows as a gap in the sparkline instead of being squeezed away.
"""

from __future__ import annotations

import csv
import io
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpufleet.cli import convert
from gpufleet.cli.columns import fmt_mem_pair
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.render_status import plural
from gpufleet.cli.timeparse import fmt_ts
from gpufleet.collector.model.records import EventRow, GpuSeries, ProcessSpan, SeriesPoint, UsageRow
from gpufleet.collector.model.views import slurm_label
from gpufleet.collector.units import fmt_duration, fmt_pct, fmt_size_short
from rich.console import Group, RenderableType
from rich.text import Text

SPARKS = "▁▂▃▄▅▆▇█"
MAX_PROCESS_ROWS = 40
MAX_EVENT_ROWS = 20


def sparkline(values: Sequence[float | None], lo: float, hi: float) -> str:
    """One block character per value, scaled to lo..hi; missing values are blanks."""
    span = hi - lo if hi > lo else 1.0
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            i = int((max(lo, min(hi, v)) - lo) / span * (len(SPARKS) - 1) + 0.5)
            out.append(SPARKS[i])
    return "".join(out)


def bucket(
    points: Sequence[SeriesPoint],
    since: float,
    until: float,
    width: int,
    value: Callable[[SeriesPoint], float | None],
    how: str = "mean",
) -> list[float | None]:
    """``width`` time buckets over since..until, each the mean (or max) of the points that fall in it."""
    width = max(width, 1)
    span = (until - since) or 1.0
    sums = [0.0] * width
    counts = [0] * width
    maxes: list[float | None] = [None] * width
    for p in points:
        v = value(p)
        if v is None:
            continue
        i = int((p.ts - since) / span * width)
        if i < 0 or i >= width:
            i = min(max(i, 0), width - 1)
        sums[i] += v
        counts[i] += 1
        m = maxes[i]
        maxes[i] = v if m is None or v > m else m
    if how == "max":
        return maxes
    return [sums[i] / counts[i] if counts[i] else None for i in range(width)]


def _spark_width(width: int) -> int:
    """Cells of a sparkline (and of the time axis under it) at console ``width``."""
    return max(min(width - 6 - 30, 120), 10)


def _mem_peak(p: SeriesPoint) -> float | None:
    """A point's memory peak: the bucket's max where rolled up, else its mean (a raw sample: the value)."""
    return p.mem_used_max if p.mem_used_max is not None else p.mem_used_mean


def _vals(points: Iterable[SeriesPoint], value: Callable[[SeriesPoint], float | None]) -> list[float]:
    return [v for v in (value(p) for p in points) if v is not None]


def _series_block(s: GpuSeries, since: float, until: float, width: int) -> list[Text]:
    spark_w = _spark_width(width)
    head = Text()
    head.append(f"GPU {s.index}", "bold")
    if s.name:
        head.append(f"  {s.name}", "dim")
    head.append(f"  ({plural(len(s.points), 'point')}, {s.resolution})", "dim")
    lines = [head]

    util = bucket(s.points, since, until, spark_w, lambda p: p.util_mean)
    umeans = _vals(s.points, lambda p: p.util_mean)
    umax = _vals(s.points, lambda p: p.util_max if p.util_max is not None else p.util_mean)
    line = Text("  util ", "dim")
    line.append(sparkline(util, 0, 100), "green")
    if umeans:
        mean, peak = fmt_pct(sum(umeans) / len(umeans), compact=True), fmt_pct(max(umax), compact=True)
        line.append(f"  mean {mean}  max {peak}")
    else:
        line.append("  no samples", "dim")
    lines.append(line)

    total = float(s.memory_total) if s.memory_total else None
    mems = bucket(s.points, since, until, spark_w, _mem_peak, "max")
    mpeak = _vals(s.points, _mem_peak)
    hi = total or (max(mpeak) if mpeak else 1.0)
    line = Text("  mem  ", "dim")
    line.append(sparkline(mems, 0, hi), "magenta")
    if mpeak:
        line.append(f"  peak {fmt_mem_pair(int(max(mpeak)), int(total))}" if total
                    else f"  peak {fmt_size_short(max(mpeak))}")
    lines.append(line)

    temps = _vals(s.points, lambda p: p.temp_max)
    power = _vals(s.points, lambda p: p.power_mean)
    if temps or power:
        bits = []
        if temps:
            bits.append(f"temp max {max(temps):.0f}°C")
        if power:
            bits.append(f"power mean {sum(power) / len(power):.0f} W")
        lines.append(Text("       " + "  ".join(bits), "dim"))
    for t in lines:
        t.truncate(width)
    return lines


def plot_start(series: Sequence[GpuSeries], since: float, until: float, first: float | None = None) -> float:
    """Where the sparklines start: ``since``, or the first sample when the samples cover under a quarter of
    the range (a collector that started minutes ago would otherwise draw all it has in one column of a
    24 h window). ``first``: when the samples really start (the answer's ``first_sample``: a rolled-up
    point says only its bucket)."""
    if first is None:
        first = min((p.ts for s in series for p in s.points), default=None)
    if first is None or first <= since or (until - first) >= (until - since) / 4:
        return since
    return first


def _axis(since: float, until: float, width: int) -> Text:
    spark_w = _spark_width(width)
    left, right = fmt_ts(since)[5:16], fmt_ts(until)[5:16]
    gap = max(spark_w - len(left) - len(right), 1)
    return Text("       " + left + " " * gap + right, "dim")


def _hours(*hours: float) -> list[str]:
    """GPU-hours read side by side, with one number of decimals: two when any of them is under one hour
    (a 10-minute window is not "0.0 wasted"), else one; never "0.08 held, 0.0 wasted"."""
    digits = 2 if any(0 < abs(h) < 1 for h in hours) else 1
    return [f"{h:.{digits}f}" for h in hours]


def summary_line(series: Sequence[GpuSeries], usage: Sequence[UsageRow], width: int = 1 << 30) -> Text:
    """``Summary: mean util · peak memory · GPU-hours``; where it is longer than ``width``, it breaks
    between those phrases (never inside one), the rest indented under the first."""
    utils = [v for s in series for v in _vals(s.points, lambda p: p.util_mean)]
    peak: tuple[float, int] | None = None
    for s in series:
        for v in _vals(s.points, _mem_peak):
            if peak is None or v > peak[0]:
                peak = (v, s.index)
    phrases = [Text(f"mean util {fmt_pct(sum(utils) / len(utils), compact=True)}" if utils else "no samples")]
    if peak:
        phrases.append(Text(f"peak memory {fmt_size_short(peak[0])} (GPU {peak[1]})"))
    held = sum(u.gpu_hours_held for u in usage)
    used = sum(u.gpu_hours_used for u in usage)
    wasted = sum(u.gpu_hours_wasted for u in usage)
    h, u, w = _hours(held, used, wasted)
    hours = Text(f"GPU-hours {h} held, {u} used, ")
    hours.append(f"{w} wasted", "bold yellow" if wasted >= 0.05 else "")
    phrases.append(hours)
    t = Text("Summary: ", "bold")
    col = len(t)
    for i, ph in enumerate(phrases):
        sep = " · " if i else ""
        if i and col + len(sep) + len(ph) > width:
            t.append("\n" + " " * 9)
            col, sep = 9, ""
        t.append(sep)
        t.append_text(ph)
        col += len(sep) + len(ph)
    return t


def _slurm(p: ProcessSpan) -> str:
    """``12345 train-llm (nlp/h100)``: the job, and the account and partition Slurm named."""
    return slurm_label(p.job, p.job_name, p.job_account, p.job_partition) or ""


def held_for(p: ProcessSpan) -> str:
    """``3m``, or ``3m of 3h`` when the process had run for longer than the collector saw it hold the GPU
    (it started before the collector did, or before the range)."""
    held = fmt_duration(p.last_seen - p.first_seen)
    if p.started is None or p.last_seen - p.started < (p.last_seen - p.first_seen) + 60:
        return held
    return f"{held} of {fmt_duration(p.last_seen - p.started)}"


#: what HELD FOR counts, said under the table whenever a process ran longer than it was seen (issue 36:
#: "HELD FOR 3m" where status says "TIME 3h")
HELD_NOTE = ("HELD FOR: how long the collector saw the process hold the GPU in this range; "
             "'of': how long the process had run (status's TIME): it started before it was first seen")


def process_table(procs: Sequence[ProcessSpan], width: int) -> Text:
    """The processes seen on the GPUs in the range. HELD SINCE / LAST SEEN / HELD FOR are what the collector
    observed within the range (a process older than the range shows the range's start); ``of`` adds how
    long the process had run by then, from its own start time where the agent read it."""
    cols = [
        Col("USER", shrink=True, max=16),
        Col("PID", right=True),
        Col("GPU", right=True),
        Col("HELD SINCE"),
        Col("LAST SEEN"),
        Col("HELD FOR", right=True),
        Col("MAX MEM", right=True),
        Col("SM", right=True),
    ]
    rows: list[list[Cell]] = []
    for p in sorted(procs, key=lambda p: p.first_seen)[-MAX_PROCESS_ROWS:]:
        where = " ".join(
            x
            for x in (_slurm(p), f"container {p.container}" if p.container else "")
            if x
        )
        rows.append(
            [
                (p.user or "?", "bold" if p.user else "dim"),
                str(p.pid),
                str(p.gpu_index),
                fmt_ts(p.first_seen)[5:16],
                fmt_ts(p.last_seen)[5:16],
                held_for(p),
                fmt_size_short(p.max_gpu_memory),
                fmt_pct(p.mean_sm_util, compact=True),
                (p.command or "-") + (f"  [{where}]" if where else ""),
            ]
        )
    return grid(cols, rows, width, tail="COMMAND", tail_min=30)


def render_history(result: dict[str, Any], width: int) -> RenderableType:
    since, until = float(result["since"]), float(result["until"])
    series = sorted((convert.series(s) for s in result.get("series", [])), key=lambda s: s.index)
    procs = convert.many(ProcessSpan, result.get("processes"))
    usage = convert.many(UsageRow, result.get("usage"))
    events = convert.many(EventRow, result.get("events"))
    title = Text(f"gpufleet history {result['host']}", "bold cyan")
    if result.get("gpu") is not None:
        title.append(f" GPU {result['gpu']}", "bold cyan")
    if result.get("user"):
        title.append(f" · user {result['user']}")
    title.append(f"  {fmt_ts(since)[:16]} → {fmt_ts(until)[:16]} ({fmt_duration(until - since)})", "dim")
    parts: list[RenderableType] = [title, Text()]
    seen = result.get("users_seen")
    if result.get("user") and not procs:
        who = f" (users seen: {', '.join(seen)})" if seen else " (no process held one)"
        gpu = result.get("gpu")
        where = f"GPU {gpu} of {result['host']}" if gpu is not None else result["host"]
        parts.append(Text(f"user {result['user']} held no GPU on {where} in this range{who}", "yellow"))
    elif not series:
        parts.append(Text("no samples in this range", "dim"))
    first = result.get("first_sample")
    start = plot_start(series, since, until, None if first is None else float(first))
    if start > since:
        parts.append(Text(f"samples only since {fmt_ts(start)[:16]}: the sparklines start there", "dim"))
    for s in series:
        parts.extend(_series_block(s, start, until, width))
    if series:
        parts.append(_axis(start, until, width))
    if not (result.get("user") and not procs):  # nothing of the user's to sum
        parts += [Text(), summary_line(series, usage, width)]
    if procs:
        extra = f" (latest {MAX_PROCESS_ROWS} of {len(procs)})" if len(procs) > MAX_PROCESS_ROWS else ""
        parts += [Text(), Text(f"Processes{extra}", "bold"), process_table(procs, width)]
        if any(" of " in held_for(p) for p in procs[-MAX_PROCESS_ROWS:]):
            parts.append(Text("\n".join(textwrap.wrap(HELD_NOTE, max(width, 40))), "dim"))
    if events:
        parts += [Text(), Text("Events", "bold")]
        for e in events[-MAX_EVENT_ROWS:]:
            line = Text(f"  {fmt_ts(e.ts)}  {event_text(e)}")
            line.truncate(width)
            parts.append(line)
    return Group(*parts)


def event_text(e: EventRow) -> str:
    """``GPU 2 Xid 79 (critical)``: where, what, then the message less what was already said (the agent's
    message repeats the Xid and the GPU)."""
    what = f"Xid {e.xid}" if e.kind == "xid" and e.xid is not None else e.kind
    msg = e.message or ""
    if e.xid is not None:
        msg = re.sub(rf"^Xid {e.xid}\b:?\s*", "", msg)
    if e.gpu_index is not None:
        msg = re.sub(rf"\s*\bon GPU {e.gpu_index}\b( \([^)]*\))?", "", msg)
    where = f"GPU {e.gpu_index} " if e.gpu_index is not None else ""
    sep = " " if not msg or msg.startswith("(") else ": "
    return f"{where}{what}{sep}{msg}".rstrip()


CSV_FIELDS = (
    "host",
    "gpu",
    "uuid",
    "resolution",
    "ts",
    "time",
    "util_mean",
    "util_max",
    "mem_used_mean",
    "mem_used_max",
    "memory_total",
    "temp_max",
    "power_mean",
)


def history_csv(result: dict[str, Any]) -> str:
    """One row per point per GPU, for spreadsheets."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for s in sorted((convert.series(s) for s in result.get("series", [])), key=lambda s: s.index):
        for p in s.points:
            w.writerow(
                [
                    s.host,
                    s.index,
                    s.uuid,
                    s.resolution,
                    f"{p.ts:.3f}",
                    fmt_ts(p.ts),
                    _n(p.util_mean),
                    _n(p.util_max),
                    _n(p.mem_used_mean),
                    _n(p.mem_used_max),
                    _n(s.memory_total),
                    _n(p.temp_max),
                    _n(p.power_mean),
                ]
            )
    return buf.getvalue()


def _n(v: float | int | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:.2f}" if isinstance(v, float) else str(v)
