"""``gpufleet status`` on a terminal: one line per GPU with bars, holders and flags; totals on top.

Lines are laid out by hand into fixed columns sized to the console width, not with ``rich.table.Table``:
a 1,000-host fleet is 8,000+ rows and a Table measures every cell, which alone would blow the 300 ms
budget. Every line is cut to the width, so nothing wraps at 80 columns.
"""

from __future__ import annotations

import time
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, TextIO

from gpufleet.cli.columns import (
    HEADERS,
    Layout,
    command_text,
    fit,
    fmt_mem_pair,
    fmt_power,
    fmt_temp,
    unused_text,
)
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.lines import Line, cells, output_width, tagged, to_text, use_color, write_lines
from gpufleet.cli.timeparse import fmt_ago, fmt_until
from gpufleet.collector.model.views import (
    UNKNOWN,
    FleetView,
    GpuView,
    HostInfo,
    HostView,
    ProcView,
    UserUsage,
)
from gpufleet.collector.rules.catalog import SHORT_FLAGS, flag_style, worst_first
from gpufleet.collector.units import fmt_duration, fmt_pct, fmt_size_short

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

__all__ = ["Layout", "fmt_mem_pair"]  # the columns' owners, re-exported for the screens that lay them out

MAX_PROCS_SHOWN = 3
_EIGHTHS = " ▏▎▍▌▋▊▉"

STATUS_STYLES = {"up": "green", "down": "bold red", "connecting": "yellow", "maintenance": "bold blue",
                 UNKNOWN: "dim"}
#: how a GPU that could not be read is described, by the agent's fault (collector/model/classify.py)
FAULT_STYLES = {"unreadable": "yellow", "hung": "bold red", "lost": "bold red"}
#: the fleet line: each GPU state (collector/model/views.py GPU_STATES) and its style; busy, wasted and
#: idle always, the others where there are any
STATE_STYLES = {"busy": "green", "wasted": "bold yellow", "idle": "dim", "unused": "bold yellow",
                "lost": "bold red", "hung": "bold red", "unreadable": "yellow", "unknown": "dim",
                "maintenance": "bold blue"}
#: legend lines: a folded host (``*`` in the GPU column) and a flag written short
FOLDED_NOTE = "* all of a host's GPUs on one line (problem hosts first)"


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


_fit = fit


def header(lay: Layout) -> Line:
    """The column names, one name per column at every width (issue 36)."""
    h = HEADERS
    parts = [_fit(h["host"], lay.host), _fit(h["gpu"], lay.gpu, "right")]
    if lay.model:
        parts.append(_fit(h["model"], lay.model))
    parts += [_fit(h["util"], lay.util), _fit(h["mem"], lay.mem), _fit(h["temp"], lay.temp, "right")]
    if lay.fan:
        parts.append(_fit(h["fan"], lay.fan, "right"))
    if lay.power:
        parts.append(_fit(h["power"], lay.power, "right"))
    if lay.pid:
        parts.append(_fit(h["pid"], lay.pid, "right"))
    parts.append(_fit(h["user"], lay.user))
    if lay.cmd:
        parts.append(_fit(h["cmd"], lay.cmd))
    if lay.pmem:
        parts.append(_fit(h["pmem"], lay.pmem, "right"))
    if lay.run:
        parts.append(_fit(h["run"], lay.run, "right"))
    parts.append(h["flags"])
    line = Line(" ".join(parts), "bold dim")
    return line if lay.width is None else line.truncate(lay.width)


def _proc_cells(line: Line, lay: Layout, p: ProcView | None, extra: str | None = None) -> None:
    sp = line.spans
    if p is None:
        sp.append((_fit(extra or "", lay.procs), "dim"))
        return
    sp.extend(_Gauges.of(lay).proc_cells(p))


def _flags(line: Line, flags: Sequence[str], lay: Layout, gauges: _Gauges | None = None) -> None:
    """The flags as they fit the column: whole names, else short forms (noted for the legend), else +N."""
    text, short = lay.flags_fit(flags)
    if short and gauges is not None:
        gauges.shortened.update(short)
    for i, word in enumerate(text.split(" ")):
        if i:
            line.append(" ")
        name = SHORT_FLAGS.get(word, word)
        line.append(word, "dim" if word.startswith("+") else flag_style(name))


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
        self.shortened: set[str] = set()  # short flag forms written: the legend explains them

    @staticmethod
    def of(lay: Layout) -> _Gauges:
        g = lay.gauges
        return g if isinstance(g, _Gauges) else _Gauges(lay)

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
        """PID (where shown), user, command (and its job / container where there is room), and memory and
        running time of one process (the last keyed by its shown text)."""
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
        out.append(user)
        if lay.cmd:
            out.append(self._cmd(p))
        tkey = (p.memory, lay.duration(p.running_for))
        tail = self.tail.get(tkey)
        if tail is None:
            text = (_fit(fmt_size_short(p.memory), lay.pmem, "right") + " " if lay.pmem else "") + (
                _fit(tkey[1], lay.run, "right") + " " if lay.run else "")
            tail = self.tail[tkey] = (text, "")
        if tail[0]:
            out.append(tail)
        return out

    def _cmd(self, p: ProcView) -> tuple[str, str]:
        lay = self.lay
        zombie = p.state == "Z"
        text, where = command_text(p, tags=lay.tags)
        ckey = (p.command, None if p.command else p.pid, zombie, where)
        cmd = self.cmd.get(ckey)
        if cmd is None:
            prefix = "<zombie> " if zombie else ""
            name = text[len(prefix):]
            if p.command and " " in p.command and cells(text) > lay.cmd:
                name = p.command.split(" ", 1)[1]  # "python3 train.py": the script says more than python
            text = tagged(prefix, name, where, lay.cmd, keep=lay.tags) if where else prefix + name
            cmd = self.cmd[ckey] = (_fit(text, lay.cmd) + " ", "red" if zombie else "")
        return cmd

    def util_cells(self, util: int | None) -> list[tuple[str, str]]:
        c = self.util.get(util)
        if c is None:
            frac = None if util is None else util / 100
            pct = (_fit(fmt_pct(util, compact=True), self.lay.pct, "right") + " ", "")
            c = self.util[util] = [(bar(frac, self.lay.bar) + " ", util_style(util)), pct] if self.lay.bar \
                else [pct]
        return c

    def mem_cells(self, used: int | None, total: int | None) -> list[tuple[str, str]]:
        key = (None if used is None else used >> 24, total)  # 16 MiB steps: invisible in the cells
        c = self.mem.get(key)
        if c is None:
            frac = used / total if used is not None and total else None
            text = (_fit(fmt_mem_pair(used, total), self.lay.mtext) + " ", "")
            c = self.mem[key] = [(bar(frac, self.lay.mbar) + " ", mem_style(used, total)), text] \
                if self.lay.mbar else [text]
        return c

    def temp_cell(self, temp: int | None) -> tuple[str, str]:
        c = self.temp.get(temp)
        if c is None:
            c = self.temp[temp] = (_fit(fmt_temp(temp), self.lay.temp, "right") + " ", temp_style(temp))
        return c

    def power_cell(self, power: float | None, limit: float | None) -> tuple[str, str]:
        key = (None if power is None else round(power), limit)
        c = self.power.get(key)
        if c is None:
            c = self.power[key] = (_fit(fmt_power(power, limit), self.lay.power, "right") + " ", "dim")
        return c


def _done(lay: Layout, line: Line) -> Line:
    line.rstrip()
    return line if lay.fits or lay.width is None else line.truncate(lay.width)


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
        fault = g.fault or "lost"
        said = g.error.removeprefix(f"GPU {fault}: ")  # the agent's own prefix, said once
        sp.append((_fit(f"{fault}: {said}", span - 1) + " ", FAULT_STYLES.get(fault, "bold red")))
        _flags(line, flags, lay, gauges)
        out.append(_done(lay, line))
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
    elif (held := unused_text(host, g)) is not None:  # a Slurm job holds it and runs nothing on it
        sp.append((_fit(held, lay.procs - 1) + " ", "yellow"))
    else:
        _proc_cells(line, lay, None, "-")
    if flags:
        _flags(line, flags, lay, gauges)
    out.append(_done(lay, line))
    if len(procs) < 2:
        return
    shown = procs[1:MAX_PROCS_SHOWN]
    for p in shown:
        cont = Line(" " * lay.left)
        cont.spans.extend(gauges.proc_cells(p))
        out.append(_done(lay, cont))
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
    """A host that is not up (or has no GPUs): its name, status and flags first, so a narrow screen cuts
    only the reason and times after them."""
    line = Line()
    line.append(_fit(h.name, lay.host) + " ", "bold")
    line.append(h.status, STATUS_STYLES.get(h.status, ""))
    extra = [f for f in h.flags if f != h.status and f != "down"]
    if extra:
        line.append(" ")
        _flags(line, extra, lay, None)
    bits = []
    if h.reason:
        bits.append(h.reason)
    if h.maintenance is not None:
        bits.append(fmt_until(h.maintenance.ends_at, now))
    bits.append(f"last seen {fmt_ago(h.last_seen, now)}")
    if h.gpus:
        bits.append(plural(len(h.gpus), "GPU"))
    line.append("  " + " · ".join(bits), "dim")
    return line if lay.width is None else line.truncate(lay.width)


def totals_lines(view: FleetView, width: int | None) -> list[Line]:
    """Hosts up/down, and the GPUs by state, each GPU once (``26 GPUs = 15 busy + 6 wasted + 4 idle + 1
    lost``), then GPUs running hot; one line, or two when the console is narrow."""
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
    gpus.append(f"{plural(t.gpus, 'GPU')} = ", "bold")
    first = True
    for state, style in STATE_STYLES.items():
        n = getattr(t, state)
        if n or state in ("busy", "wasted", "idle"):
            if not first:
                gpus.append(" + ", "dim")
            gpus.append(f"{n} {state}", style if n else "dim")
            first = False
    if t.hot:
        gpus.append(" · ", "dim").append(f"{t.hot} hot", "bold red")
    if width is None or hosts.cell_len() + 3 + gpus.cell_len() <= width:
        return [hosts.append("   ").extend(gpus)]
    hosts.truncate(width)
    gpus.truncate(width)
    return [hosts, gpus]


def title_line(view: FleetView, width: int | None, label: str = "gpufleet status") -> Line:
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
    return line if width is None else line.truncate(width)


def legend_lines(gauges: _Gauges, folded: bool, width: int | None) -> list[Line]:
    """What the screen wrote in short: ``*`` for a folded host, the short flags used."""
    out = []
    if folded:
        out.append(Line(FOLDED_NOTE, "dim"))
    if gauges.shortened:
        names = ", ".join(f"{s} = {SHORT_FLAGS[s]}" for s in sorted(gauges.shortened))
        out.append(Line(f"short flags: {names}", "dim"))
    return out if width is None else [line.truncate(width) for line in out]


def status_lines(
    view: FleetView,
    width: int | None,
    *,
    title: str = "gpufleet status",
    height: int | None = None,
    expand: Container[str] | None = None,
) -> list[Line]:
    """The whole screen as lines: title, totals, column header, then every host's GPUs (at most ``height``
    lines: a watch screen needs no more, and building fewer is what keeps it cheap), then what the screen
    wrote in short. With ``expand``, only the hosts it names get a line per GPU; the others get one summary
    line each. ``width`` None: no limit (a pipe: every line whole)."""
    now = view.generated_at
    lay = Layout(width, view)
    lines: list[Line] = [
        title_line(view, lay.width, title),
        *totals_lines(view, lay.width),
        Line(),
        header(lay),
    ]
    gauges = _Gauges(lay)
    folded = False
    for h in view.hosts:
        if height is not None and len(lines) >= height:
            break
        if h.status != "up" and view.source == "live" or not h.gpus:
            lines.append(_host_line(lay, h, now))
            continue
        if expand is not None and h.name not in expand:
            lines.append(_summary_line(lay, gauges, h))
            folded = True
            continue
        for i, g in enumerate(h.gpus):
            _gpu_lines(lines, lay, gauges, h, g, i == 0)
    if not view.hosts:
        users = view.filters.get("user")
        said = (f"no GPU held by {', '.join(users)} now" if users and set(view.filters) == {"user"}
                else "no hosts match" if view.filters else "no hosts configured")
        lines.append(Line(said, "dim"))
    legend = legend_lines(gauges, folded, lay.width)
    if height is None:
        return lines + legend
    return lines[: max(height - len(legend), 0)] + legend[:height]


def head_height(view: FleetView, width: int | None) -> int:
    """Lines :func:`status_lines` writes before the first host: title, totals (one or two), blank, header."""
    return 3 + len(totals_lines(view, None if width is None else max(width, 40)))


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
    gets a summary line (and the legend one line) and hosts with a problem flag are opened first, then the
    rest in order, while the room lasts: what matters stays visible at 80x24."""
    live = view.source == "live"
    counts = [host_height(h, live) for h in view.hosts]
    if sum(counts) <= rows or len(counts) > rows - 1:
        return None
    left = rows - 1 - len(counts)
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
    lay_rows = height - head_height(view, width) - _short_legend(view, width)
    expand = hosts_to_expand(view, lay_rows)
    return status_lines(view, width, title=title, height=height, expand=expand)


def _short_legend(view: FleetView, width: int) -> int:
    """1 when the screen will write some flag short (its legend takes a line), else 0."""
    lay = Layout(width, view)
    for h in view.hosts:
        for i, g in enumerate(h.gpus):
            flags = g.flags + (h.flags if i == 0 else [])
            if flags and lay.flags_fit(flags)[1]:
                return 1
    return 0


def _summary_line(lay: Layout, gauges: _Gauges, h: HostView) -> Line:
    """One host on one line: mean util, summed memory, hottest GPU, total power, its users (the one who
    holds most, ``+N`` others) and every flag of the host and its GPUs (the worst first)."""
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
    users = sorted(held, key=lambda u: -held[u])
    who = users[0] if users else "-"
    if len(users) > 1 and cells(f"{who} +{len(users) - 1}") <= lay.user:
        who = f"{who} +{len(users) - 1}"
    sp.append((_fit(who, lay.user) + " ", "bold" if held else "dim"))
    if lay.cmd:
        what = f"{plural(len(h.gpus), 'GPU')}, {plural(len(procs), 'process')}"
        if cells(what) > lay.cmd:
            what = plural(len(h.gpus), "GPU")
        sp.append((_fit(what, lay.cmd) + " ", "dim"))
    longest = max((p.running_for for p in procs if p.running_for is not None), default=None)
    mem = sum(p.memory or 0 for p in procs) if procs else None
    tail = (_fit(fmt_size_short(mem), lay.pmem, "right") + " " if lay.pmem else "") + (
        _fit(lay.duration(longest), lay.run, "right") + " " if lay.run else "")
    if tail:
        sp.append((tail, ""))
    names = set(h.flags).union(*(g.flags for g in h.gpus))
    flags = worst_first(names)
    if flags:
        _flags(line, flags, lay, gauges)
    return _done(lay, line)


def print_status(view: FleetView, out: TextIO, width: int | None = None) -> None:
    """The one-shot status screen as plain lines on ``out`` (colour when it is a terminal): no rich.
    ``width`` None: the terminal's, or no limit where ``out`` is not a terminal (a pipe gets whole lines)."""
    write_lines(status_lines(view, width if width is not None else output_width(out)), out,
                color=use_color(out))


def render_status(
    view: FleetView, width: int | None, *, title: str = "gpufleet status", height: int | None = None
) -> Text:
    """:func:`status_lines` as one rich Text (the watch screen, the demo, tests); with ``height``, fitted
    to it (:func:`fitted_lines`)."""
    if height is None or width is None:
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
            fmt_size_short(r.memory),
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
