"""``gpufleet status`` on a terminal: one line per GPU with bars, holders and flags; totals on top.

Lines are laid out by hand into fixed columns sized to the console width, not with ``rich.table.Table``:
a 1,000-host fleet is 8,000+ rows and a Table measures every cell, which alone would blow the 300 ms
budget. Every line is cut to the width, so nothing wraps at 80 columns.
"""

from __future__ import annotations

import time
from collections.abc import Container, Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.lines import Line, cells, cut, tagged, term_width, to_text, use_color, write_lines
from gpufleet.cli.timeparse import fmt_ago, fmt_until
from gpufleet.collector.model.views import (
    UNKNOWN,
    FleetView,
    GpuView,
    HostInfo,
    HostView,
    ProcView,
    UserUsage,
    allocation_label,
    where_label,
)
from gpufleet.collector.rules.catalog import flag_style, worst_first
from gpufleet.collector.units import GIB, fmt_duration, fmt_duration_short, fmt_pct, fmt_size, fmt_size_short

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

MAX_PROCS_SHOWN = 3
_EIGHTHS = " ▏▎▍▌▋▊▉"

STATUS_STYLES = {"up": "green", "down": "bold red", "connecting": "yellow", "maintenance": "bold blue",
                 UNKNOWN: "dim"}
FLAG_CELLS = 9  # the narrow flags column: "orphaned", "throttled"; wider where a longer flag is on screen


# ------------------------------------------------------------------------------------------ formatting


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells in eighth-blocks (``████▌    ``)."""
    if fraction is None:
        return " " * width
    eighths = int(round(max(0.0, min(1.0, fraction)) * width * 8))
    full, part = divmod(eighths, 8)
    s = "█" * full + (_EIGHTHS[part] if part else "")
    return s + " " * (width - len(s))


def plural(n: int, word: str) -> str:
    """``1 host``, ``2 hosts``, ``2 processes``."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith(("s", "x", "sh", "ch")) else f"{n} {word}s"


def fmt_mem_pair(used: int | None, total: int | None) -> str:
    """``31/80G`` (used/total GiB; one decimal on small cards)."""
    if used is None and total is None:
        return "-"
    if total is not None and total < 10 * GIB:
        return f"{(used or 0) / GIB:.1f}/{total / GIB:.0f}G"
    u = "?" if used is None else f"{used / GIB:.0f}"
    t = "?" if total is None else f"{total / GIB:.0f}"
    return f"{u}/{t}G"


def util_style(util: int | None) -> str:
    if util is None:
        return "dim"
    if util < 5:
        return "dim"
    return "green" if util >= 50 else "yellow"


def mem_style(used: int | None, total: int | None) -> str:
    if used is None or not total:
        return "dim"
    f = used / total
    return "red" if f >= 0.95 else "magenta" if f >= 0.5 else "cyan"


def temp_style(temp: int | None) -> str:
    if temp is None:
        return "dim"
    return "bold red" if temp >= 85 else "yellow" if temp >= 75 else "green"


def _fit(text: str, width: int, align: str = "left") -> str:
    """Pad or cut ``text`` to exactly ``width`` cells."""
    if width <= 0:
        return ""
    n = cells(text)
    if n > width:
        if width == 1:
            return cut(text, 1)
        cut_text = cut(text, width - 1) + "…"
        return cut_text + " " * (width - cells(cut_text))
    pad = " " * (width - n)
    return pad + text if align == "right" else text + pad


# -------------------------------------------------------------------------------------------- layout


class Layout:
    """Column widths for one console width. Narrow consoles drop the power column (under 96), shrink the
    bars and print running times with one unit, so the command keeps some room at 80 columns; wide ones
    add the PID (130+), the GPU model (170+), the fan (180+), and the job / container after the command."""

    def __init__(self, width: int, host_names: Iterable[str], longest_flag: int = 0) -> None:
        self.width = max(width, 40)
        self.host = max(min(max((len(n) for n in host_names), default=4), 16), 4)
        self.wide = wide = self.width >= 110
        self.bar = (10 if self.width >= 140 else 6) if wide else 4  # util bar
        self.mbar = (10 if self.width >= 140 else 6) if wide else 3  # memory bar
        self.gpu = 3 if wide else 2
        self.model = 14 if self.width >= 170 else 0  # "A100-SXM4-80GB"
        self.util = self.bar + 5  # bar + " 100%"
        self.mtext = 8  # "141/141G"
        self.mem = self.mbar + 1 + self.mtext
        self.temp = 4 if wide else 3
        self.power = 9 if self.width >= 96 else 0  # "210/400W"
        self.fan = 4 if self.width >= 180 else 0  # " 45%"
        self.pid = 7 if self.width >= 130 else 0
        self.user = 10 if wide else 7
        self.pmem = 5 if wide else 4
        self.run = 7 if wide else 3  # how long the process has been running
        left = [self.host, self.gpu, self.model, self.util, self.mem, self.temp, self.fan, self.power]
        self.left = sum(w + 1 for w in left if w)  # cells before the process columns
        fixed = self.left + sum(w + 1 for w in (self.pid, self.user, self.pmem, self.run) if w)
        # one whole flag name always fits: the longest one on screen (``longest_flag``), at least FLAG_CELLS
        self.flags = max(14 if wide else FLAG_CELLS, min(longest_flag, 16))
        self.cmd = max(self.width - fixed - self.flags - 1, 6)
        if wide and self.cmd > 48:
            self.flags += self.cmd - 48
            self.cmd = 48
        #: cells of the process columns (PID, user, command, memory, running for) with their gaps
        self.procs = fixed - self.left + self.cmd + 1
        #: every column fits: GPU lines need no truncation (their cells are padded or cut to the columns)
        self.fits = fixed + self.cmd + 1 + self.flags <= self.width
        self.gauges: _Gauges | None = None  # the memoized cells of this layout, made on first use

    def duration(self, seconds: float | None) -> str:
        if seconds is None:
            return "-"
        return fmt_duration(seconds) if self.wide else fmt_duration_short(seconds)

    def header(self) -> Line:
        parts = [
            _fit("HOST", self.host),
            _fit("GPU" if self.gpu >= 3 else "#", self.gpu, "right"),
            *([_fit("MODEL", self.model)] if self.model else []),
            _fit("UTIL", self.util),
            _fit("MEMORY GiB", self.mem),
            _fit("TEMP" if self.temp >= 4 else "T°", self.temp),
        ]
        if self.fan:
            parts.append(_fit("FAN", self.fan, "right"))
        if self.power:
            parts.append(_fit("POWER", self.power))
        if self.pid:
            parts.append(_fit("PID", self.pid, "right"))
        parts += [
            _fit("USER", self.user),
            _fit("COMMAND", self.cmd),
            _fit("GMEM" if self.pmem >= 4 else "MEM", self.pmem, "right"),
            _fit("RUNNING" if self.run >= 7 else "RUN", self.run, "right"),
            "FLAGS",
        ]
        return Line(" ".join(parts), "bold dim").truncate(self.width)


def _proc_cells(line: Line, lay: Layout, p: ProcView | None, extra: str | None = None) -> None:
    sp = line.spans
    if p is None:
        sp.append((_fit(extra or "", lay.procs), "dim"))
        return
    sp.extend(_Gauges.of(lay).proc_cells(p))


def _flags(line: Line, flags: Sequence[str], width: int) -> None:
    used = 0
    for i, f in enumerate(flags):
        need = len(f) + (1 if i else 0)
        more = len(flags) - i - 1
        if used + need + (3 if more else 0) > width and i:
            line.append(f" +{len(flags) - i}", "dim")
            return
        if i:
            line.append(" ")
        line.append(f, flag_style(f))
        used += need


class _Gauges:
    """The util / memory / temperature / power cells of one layout, memoized: a fleet repeats values a lot
    (0 % and 100 % util, the same temperatures and power limits), and these cells are most of a line."""

    def __init__(self, lay: Layout) -> None:
        self.lay = lay
        lay.gauges = self
        self.index: dict[int, str] = {}
        self.user: dict[str | None, tuple[str, str]] = {}
        self.cmd: dict[tuple[str | None, int | None, bool, str | None], tuple[str, str]] = {}
        self.pid: dict[int, tuple[str, str]] = {}
        self.model: dict[str | None, tuple[str, str]] = {}
        self.tail: dict[tuple[int | None, str], tuple[str, str]] = {}
        self.util: dict[int | None, list[tuple[str, str]]] = {}
        self.temp: dict[int | None, tuple[str, str]] = {}
        self.mem: dict[tuple[int | None, int | None], list[tuple[str, str]]] = {}
        self.power: dict[tuple[float | None, float | None], tuple[str, str]] = {}

    @staticmethod
    def of(lay: Layout) -> _Gauges:
        return lay.gauges if lay.gauges is not None else _Gauges(lay)

    def index_cell(self, index: int) -> str:
        c = self.index.get(index)
        if c is None:
            c = self.index[index] = _fit(str(index), self.lay.gpu, "right") + " "
        return c

    def model_cell(self, name: str | None) -> tuple[str, str]:
        c = self.model.get(name)
        if c is None:
            short = (name or "-").removeprefix("NVIDIA ").removeprefix("GeForce ")
            c = self.model[name] = (_fit(short, self.lay.model) + " ", "dim")
        return c

    def proc_cells(self, p: ProcView) -> list[tuple[str, str]]:
        """PID (wide layouts), user, command (and job / container where wide), and memory + running time of
        one process (the last keyed by its shown text)."""
        lay = self.lay
        out = []
        if lay.pid:
            pid = self.pid.get(p.pid)
            if pid is None:
                pid = self.pid[p.pid] = (_fit(str(p.pid), lay.pid, "right") + " ", "dim")
            out.append(pid)
        user = self.user.get(p.user)
        if user is None:
            user = self.user[p.user] = (_fit(p.user or "?", lay.user) + " ", "bold" if p.user else "dim")
        zombie = p.state == "Z"
        # wide: the job (or pod, or container) after the command; narrower: a named Slurm job or pod
        where = where_label(p, lay.wide)
        ckey = (p.command, None if p.command else p.pid, zombie, where)
        cmd = self.cmd.get(ckey)
        if cmd is None:
            name = p.command or f"pid {p.pid}"
            prefix = "<zombie> " if zombie else ""
            if p.command and " " in p.command and cells(prefix + name) > lay.cmd:
                name = p.command.split(" ", 1)[1]  # "python3 train.py": the script says more than python
            text = tagged(prefix, name, where, lay.cmd, keep=lay.wide) if where else prefix + name
            cmd = self.cmd[ckey] = (_fit(text, lay.cmd) + " ", "red" if zombie else "")
        tkey = (p.memory, lay.duration(p.running_for))
        tail = self.tail.get(tkey)
        if tail is None:
            tail = self.tail[tkey] = (
                _fit(fmt_size_short(p.memory), lay.pmem, "right") + " "
                + _fit(tkey[1], lay.run, "right") + " ",
                "",
            )
        out += [user, cmd, tail]
        return out

    def util_cells(self, util: int | None) -> list[tuple[str, str]]:
        c = self.util.get(util)
        if c is None:
            frac = None if util is None else util / 100
            c = self.util[util] = [
                (bar(frac, self.lay.bar), util_style(util)),
                (_fit(fmt_pct(util, compact=True), 5, "right") + " ", ""),
            ]
        return c

    def mem_cells(self, used: int | None, total: int | None) -> list[tuple[str, str]]:
        key = (None if used is None else used >> 24, total)  # 16 MiB steps: invisible in the cells
        c = self.mem.get(key)
        if c is None:
            frac = used / total if used is not None and total else None
            c = self.mem[key] = [
                (bar(frac, self.lay.mbar), mem_style(used, total)),
                (" " + _fit(fmt_mem_pair(used, total), self.lay.mtext) + " ", ""),
            ]
        return c

    def temp_cell(self, temp: int | None) -> tuple[str, str]:
        c = self.temp.get(temp)
        if c is None:
            c = self.temp[temp] = (
                _fit("-" if temp is None else f"{temp}°", self.lay.temp, "right") + " ",
                temp_style(temp),
            )
        return c

    def power_cell(self, power: float | None, limit: float | None) -> tuple[str, str]:
        key = (None if power is None else round(power), limit)
        c = self.power.get(key)
        if c is None:
            if power is None:
                pw = "-"
            elif limit:
                pw = f"{power:.0f}/{limit:.0f}W"
            else:
                pw = f"{power:.0f}W"
            c = self.power[key] = (_fit(pw, self.lay.power, "right") + " ", "dim")
        return c


def _gpu_lines(
    out: list[Line], lay: Layout, gauges: _Gauges, host: HostView, g: GpuView, first: bool
) -> None:
    line = Line()
    sp = line.spans
    if first:
        sp.append((_fit(host.name, lay.host) + " ", "bold"))
    else:
        sp.append((" " * (lay.host + 1), ""))
    sp.append((gauges.index_cell(g.index), ""))
    if lay.model:
        sp.append(gauges.model_cell(g.name))
    flags = g.flags + [f for f in host.flags if f not in g.flags] if first and host.flags else g.flags
    if g.error:
        span = lay.left - (lay.host + 1 + lay.gpu + 1) - (lay.model + 1 if lay.model else 0) + lay.procs
        sp.append((_fit(f"lost: {g.error}", span - 1) + " ", "bold red"))
        _flags(line, flags, lay.flags)
        out.append(line.rstrip().truncate(lay.width))
        return
    sp.extend(gauges.util_cells(g.util))
    sp.extend(gauges.mem_cells(g.mem_used, g.mem_total))
    sp.append(gauges.temp_cell(g.temp))
    if lay.fan:
        sp.append((_fit("-" if g.fan is None else f"{g.fan}%", lay.fan, "right") + " ", "dim"))
    if lay.power:
        sp.append(gauges.power_cell(g.power, g.power_limit))
    procs = g.processes
    if procs:
        sp.extend(gauges.proc_cells(procs[0]))
    elif g.allocated_to is not None:  # a Slurm job holds it and runs nothing on it
        job = next((a for a in host.allocations if a.job == g.allocated_to), None)
        label = allocation_label(job) if job is not None else f"job {g.allocated_to}"
        sp.append((_fit(f"unused by Slurm job {label}", lay.procs - 1) + " ", "yellow"))
    else:
        _proc_cells(line, lay, None, "-")
    if flags:
        _flags(line, flags, lay.flags)
    line.rstrip()
    out.append(line if lay.fits else line.truncate(lay.width))
    if len(procs) < 2:
        return
    shown = procs[1:MAX_PROCS_SHOWN]
    for p in shown:
        cont = Line(" " * lay.left)
        cont.spans.extend(gauges.proc_cells(p))
        cont.rstrip()
        out.append(cont if lay.fits else cont.truncate(lay.width))
    hidden = len(procs) - 1 - len(shown)
    if hidden > 0:
        out.append(Line(" " * lay.left + f"+{hidden} more processes", "dim"))


def gpu_row(lay: Layout, host: HostView, g: GpuView) -> Line:
    """One GPU on one line, named by its host (``gpufleet top``'s rows, sorted away from their host):
    the first process only; the others are in top's GPU view."""
    out: list[Line] = []
    _gpu_lines(out, lay, _Gauges.of(lay), host, g, True)
    return out[0]


def host_row(lay: Layout, h: HostView, now: float) -> Line:
    """A host without GPU lines (down, or none reported) on one line."""
    return _host_line(lay, h, now)


def _host_line(lay: Layout, h: HostView, now: float) -> Line:
    line = Line()
    line.append(_fit(h.name, lay.host) + " ", "bold")
    line.append(h.status, STATUS_STYLES.get(h.status, ""))
    bits = []
    if h.reason:
        bits.append(h.reason)
    if h.maintenance is not None:
        bits.append(fmt_until(h.maintenance.ends_at, now))
    bits.append(f"last seen {fmt_ago(h.last_seen, now)}")
    if h.gpus:
        bits.append(plural(len(h.gpus), "GPU"))
    line.append("  " + " · ".join(bits), "dim")
    extra = [f for f in h.flags if f != "down"]
    if extra:
        line.append("  ")
        _flags(line, extra, lay.width)
    line.truncate(lay.width)
    return line


def totals_lines(view: FleetView, width: int) -> list[Line]:
    """Hosts up/down and GPUs busy/idle/wasted/...; one line, or two when the console is narrow."""
    t = view.totals
    hosts = Line()
    hosts.append(f"{plural(t.hosts, 'host')}: ", "bold")
    hosts.append(f"{t.hosts_up} up", "green")
    if t.hosts_down:
        hosts.append(f", {t.hosts_down} down", "bold red")
    if t.hosts_connecting:
        hosts.append(f", {t.hosts_connecting} connecting", "yellow")
    if t.hosts_maintenance:
        hosts.append(f", {t.hosts_maintenance} in maintenance", "bold blue")
    gpus = Line()
    gpus.append(f"{plural(t.gpus, 'GPU')}: ", "bold")
    parts = [
        (t.busy, "busy", "green"),
        (t.idle, "idle", "dim"),
        (t.unused, "unused", "bold yellow"),
        (t.wasted, "wasted", "bold yellow"),
        (t.hot, "hot", "bold red"),
        (t.stale, "stale", "magenta"),
        (t.orphaned, "orphaned", "magenta"),
        (t.lost, "lost", "bold red"),
        (t.unknown, "unknown", "dim"),
    ]
    first = True
    for n, name, style in parts:
        if n or name in ("busy", "idle", "wasted"):
            if not first:
                gpus.append(" · ", "dim")
            gpus.append(f"{n} {name}", style if n else "dim")
            first = False
    if hosts.cell_len() + 3 + gpus.cell_len() <= width:
        return [hosts.append("   ").extend(gpus)]
    hosts.truncate(width)
    gpus.truncate(width)
    return [hosts, gpus]


def title_line(view: FleetView, width: int, label: str = "gpufleet status") -> Line:
    line = Line()
    line.append(label, "bold cyan")
    when = time.strftime("%H:%M:%S", time.localtime(view.generated_at))
    if view.source == "store":
        line.append(f"  stored data · last sample {fmt_ago(view.last_sample, view.generated_at)}", "yellow")
    else:
        line.append("  live", "green")
    if view.filters:
        line.append("  " + " ".join(f"--{k} {','.join(v)}" for k, v in view.filters.items()), "dim")
    line.append(f"  {when}", "dim")
    line.truncate(width)
    return line


def status_lines(
    view: FleetView,
    width: int,
    *,
    title: str = "gpufleet status",
    height: int | None = None,
    expand: Container[str] | None = None,
) -> list[Line]:
    """The whole screen as lines: title, totals, column header, then every host's GPUs (at most ``height``
    lines: a watch screen needs no more, and building fewer is what keeps it cheap). With ``expand``, only
    the hosts it names get a line per GPU; the others get one summary line each."""
    now = view.generated_at
    lay = Layout(width, (h.name for h in view.hosts), longest_flag(view))
    lines: list[Line] = [
        title_line(view, lay.width, title),
        *totals_lines(view, lay.width),
        Line(),
        lay.header(),
    ]
    limit = height if height is not None else 1 << 62
    gauges = _Gauges(lay)
    for h in view.hosts:
        if len(lines) >= limit:
            break
        if h.status != "up" and view.source == "live" or not h.gpus:
            lines.append(_host_line(lay, h, now))
            continue
        if expand is not None and h.name not in expand:
            lines.append(_summary_line(lay, gauges, h))
            continue
        for i, g in enumerate(h.gpus):
            _gpu_lines(lines, lay, gauges, h, g, i == 0)
    if not view.hosts:
        lines.append(Line("no hosts match" if view.filters else "no hosts configured", "dim"))
    return lines[:limit]


def longest_flag(view: FleetView) -> int:
    """Cells the flags column needs so it never cuts a flag: the longest flag name in the view, and room
    for a " +N" after it where a GPU or host has more than one."""
    longest, more = 0, False
    for h in view.hosts:
        lists = [h.flags, *(g.flags for g in h.gpus)]
        more = more or len(h.flags) > 0 and any(g.flags for g in h.gpus)
        for flags in lists:
            if flags:
                longest = max(longest, *map(len, flags))
                more = more or len(flags) > 1
    return longest + (3 if more else 0)


def head_height(view: FleetView, width: int) -> int:
    """Lines :func:`status_lines` writes before the first host: title, totals (one or two), blank, header."""
    return 3 + len(totals_lines(view, max(width, 40)))


def host_height(h: HostView, live: bool) -> int:
    """Lines :func:`status_lines` gives host ``h`` with a line per GPU (processes beyond the first
    included), counted without rendering."""
    if h.status != "up" and live or not h.gpus:
        return 1
    n = 0
    for g in h.gpus:
        n += 1
        k = len(g.processes)
        if k >= 2 and not g.error:
            shown = min(k - 1, MAX_PROCS_SHOWN - 1)
            n += shown + (1 if k - 1 > shown else 0)
    return n


def hosts_to_expand(view: FleetView, rows: int) -> set[str] | None:
    """Which hosts get a line per GPU when ``rows`` lines are left for hosts: None when all of them fit
    (or not even one summary line per host does: then the list is cut, as before). Otherwise every host
    gets a summary line and hosts with a problem flag are opened first, then the rest in order, while the
    room lasts: what matters stays visible at 80x24."""
    live = view.source == "live"
    counts = [host_height(h, live) for h in view.hosts]
    if sum(counts) <= rows or len(counts) > rows:
        return None
    left = rows - len(counts)
    flagged = [bool(h.flags) or any(g.flags for g in h.gpus) for h in view.hosts]
    order = sorted(range(len(counts)), key=lambda i: (not flagged[i], i))
    expand: set[str] = set()
    for i in order:
        if counts[i] - 1 <= left:
            expand.add(view.hosts[i].name)
            left -= counts[i] - 1
    return expand


def fitted_lines(view: FleetView, width: int, height: int, *, title: str = "gpufleet status") -> list[Line]:
    """:func:`status_lines` in at most ``height`` lines, hosts summarised one a line when their GPUs do
    not all fit (see :func:`hosts_to_expand`)."""
    expand = hosts_to_expand(view, height - head_height(view, width))
    return status_lines(view, width, title=title, height=height, expand=expand)


def _summary_line(lay: Layout, gauges: _Gauges, h: HostView) -> Line:
    """One host on one line: mean util, summed memory, hottest GPU, total power, its users and every flag
    of the host and its GPUs (the worst first)."""
    ok = [g for g in h.gpus if not g.error]
    utils = [g.util for g in ok if g.util is not None]
    used = [g.mem_used for g in ok if g.mem_used is not None]
    totals = [g.mem_total for g in ok if g.mem_total is not None]
    temps = [g.temp for g in ok if g.temp is not None]
    powers = [g.power for g in ok if g.power is not None]
    limits = [g.power_limit for g in ok if g.power_limit is not None]
    procs = [p for g in h.gpus for p in g.processes]
    held: dict[str, int] = {}
    for p in procs:
        held[p.user or "?"] = held.get(p.user or "?", 0) + (p.memory or 0)
    line = Line()
    sp = line.spans
    sp.append((_fit(h.name, lay.host) + " ", "bold"))
    sp.append((_fit("*", lay.gpu, "right") + " ", "dim"))
    if lay.model:
        models = {g.name for g in h.gpus if g.name}
        sp.append(gauges.model_cell(models.pop() if len(models) == 1 else "mixed" if models else None))
    sp.extend(gauges.util_cells(round(sum(utils) / len(utils)) if utils else None))
    sp.extend(gauges.mem_cells(sum(used) if used else None, sum(totals) if totals else None))
    sp.append(gauges.temp_cell(max(temps) if temps else None))
    if lay.fan:
        fans = [g.fan for g in ok if g.fan is not None]
        sp.append((_fit(f"{max(fans)}%" if fans else "-", lay.fan, "right") + " ", "dim"))
    if lay.power:
        sp.append(gauges.power_cell(sum(powers) if powers else None, sum(limits) if limits else None))
    if lay.pid:
        sp.append((" " * (lay.pid + 1), ""))
    users = ",".join(sorted(held, key=lambda u: -held[u])) or "-"
    sp.append((_fit(users, lay.user) + " ", "bold" if held else "dim"))
    what = f"{plural(len(h.gpus), 'GPU')}, {plural(len(procs), 'process')}"
    if cells(what) > lay.cmd:
        what = plural(len(h.gpus), "GPU")
    sp.append((_fit(what, lay.cmd) + " ", "dim"))
    longest = max((p.running_for for p in procs if p.running_for is not None), default=None)
    mem = sum(p.memory or 0 for p in procs) if procs else None
    tail = _fit(fmt_size_short(mem), lay.pmem, "right") + " " + _fit(lay.duration(longest), lay.run, "right")
    sp.append((tail + " ", ""))
    names = set(h.flags).union(*(g.flags for g in h.gpus))
    flags = worst_first(names)
    if flags:
        _flags(line, flags, lay.flags)
    line.rstrip()
    return line if lay.fits else line.truncate(lay.width)


def print_status(view: FleetView, out: TextIO) -> None:
    """The one-shot status screen as plain lines on ``out`` (colour when it is a terminal): no rich."""
    write_lines(status_lines(view, term_width()), out, color=use_color(out))


def render_status(
    view: FleetView, width: int, *, title: str = "gpufleet status", height: int | None = None
) -> Text:
    """:func:`status_lines` as one rich Text (the watch screen, the demo, tests); with ``height``, fitted
    to it (:func:`fitted_lines`)."""
    if height is None:
        return to_text(status_lines(view, width, title=title))
    return to_text(fitted_lines(view, width, height, title=title))


# ---------------------------------------------------------------------------------------- other views


def render_by_user(view: FleetView, rows: Sequence[UserUsage], width: int) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    cols = [
        Col("USER", shrink=True),
        Col("GPUS", right=True),
        Col("WASTED", right=True),
        Col("GPU MEM", right=True),
        Col("UTIL", right=True),
        Col("LONGEST", right=True),
    ]
    cells_: list[list[Cell]] = [
        [
            (r.user, "bold"),
            str(r.gpus),
            (str(r.wasted), "bold yellow" if r.wasted else "dim"),
            fmt_size(r.memory),
            fmt_pct(r.mean_util, compact=True),
            fmt_duration(r.longest),
            ", ".join(r.hosts),
        ]
        for r in rows
    ]
    parts: list[RenderableType] = [
        title_line(view, width, "gpufleet status --by user").text(),
        *(t.text() for t in totals_lines(view, width)),
        Text(),
    ]
    parts.append(
        grid(cols, cells_, width, tail="HOSTS", tail_min=20)
        if rows
        else Text("no processes hold a GPU", style="dim")
    )
    return Group(*parts)


def render_hosts(hosts: Sequence[HostInfo], width: int, now: float) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    cols = [
        Col("HOST", shrink=True),
        Col("STATUS"),
        Col("SINCE", right=True),
        Col("SEEN", right=True),
        Col("GPUS", right=True),
        Col("AGENT", shrink=True),
        Col("DRIVER"),
        Col("TAGS", shrink=True, max=24),
    ]
    shedding = any(h.shed for h in hosts)
    if shedding:  # only while the store sheds: a column nobody needs otherwise
        cols.insert(5, Col("SHED", right=True))
    rows: list[list[Cell]] = []
    for h in hosts:
        agent = h.agent_version or "-"
        if h.backend == "fake":
            agent += " (fake)"
        rows.append(
            [
                (h.name, "bold"),
                (h.status, STATUS_STYLES.get(h.status, "")),
                fmt_duration(now - h.since) if h.since else "-",
                fmt_ago(h.last_seen, now) if h.last_seen else "never",
                str(h.gpus),
                *([(str(h.shed or 0), "yellow" if h.shed else "")] if shedding else []),
                agent,
                h.driver_version or "-",
                ",".join(h.tags),
                (" · ".join(x for x in (h.reason, h.maintenance and fmt_until(h.maintenance.ends_at, now))
                            if x), "dim"),
            ]
        )
    up = sum(1 for h in hosts if h.status == "up")
    head = Text(f"{plural(len(hosts), 'host')}, {up} up", style="bold")
    return Group(head, grid(cols, rows, width, tail="REASON", tail_min=40))
