"""``gpufleet top``: the whole fleet in one live, interactive screen (nvitop's idea, for many hosts).

One row per GPU (a host that is down, or has no GPUs, is one row), sorted by a key, filtered by ``/``
text (as it is typed), scrolled with the arrows; Enter opens the selected GPU: its model, every process
(PID, user, GPU memory, SM util, running for, container / job, command) and a util and memory sparkline from
history. The keys are nvitop's and htop's where those have one (issue 36): ``h``, ``?`` or F1 help, ``q`` or
F10 quit, Esc back (out of the help, the GPU, the filter; never out of top), ``<`` ``>`` (``,`` ``.``) the
sort column, ``I`` (or ``r``) the order; the footer lists them and a legend line says what the screen
wrote short. It asks the same ``status`` op as ``gpufleet status`` (so it works against a collector, a
running demo, or the stored fallback alike) and ``history`` for the sparkline of the open GPU.

Built on rich's ``Live`` plus raw terminal keys (:mod:`gpufleet.cli.keys`), not on textual. Weighed:

* textual (8.x on the package index) gives widgets, mouse and resize events for free, but it is a second
  layout engine: its DataTable would re-implement the status columns (bars, memory pairs, flag styles,
  the 80-column rules) that :mod:`gpufleet.cli.render_status` owns, and the two would drift. Here every
  GPU row *is* a status line, built by the same code.
* It adds a dependency tree (textual, platformdirs, markdown-it extras, ...) to a tool installed on
  collector boxes, and ~0.2 s of import time to a command that otherwise starts in a few tens of ms.
* What top needs from a TUI is small: a handful of keys, one text prompt, a selection, a scroll offset.
  cbreak mode and ``select`` give that in ~100 lines, and the screen stays testable under tmux like
  ``status --watch`` (keys in with send-keys, text out with capture-pane).

The cost is owned key decoding (escape sequences, a lone Esc) and no mouse; a resize shows at the next
refresh (every ``--interval``) or key press.
"""

from __future__ import annotations

import fnmatch
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
from gpufleet.cli import convert
from gpufleet.cli.client import EXIT_DENIED, Backend, CliError
from gpufleet.cli.columns import fmt_mem_pair, fmt_power, fmt_temp
from gpufleet.cli.grid import Cell, Col, grid_lines
from gpufleet.cli.keys import KeyReader
from gpufleet.cli.lines import Line, cells, to_text
from gpufleet.cli.options import State, pass_state, split_list, status_view, where_options
from gpufleet.cli.render_history import bucket, sparkline
from gpufleet.cli.render_status import (
    Layout,
    gpu_row,
    header,
    host_row,
    title_line,
    totals_lines,
)
from gpufleet.collector.model.gpulist import fmt_indexes
from gpufleet.collector.model.names import is_glob, natural_key
from gpufleet.collector.model.views import (
    AllocationView,
    FleetView,
    GpuView,
    HostView,
    allocation_label,
    where_label,
)
from gpufleet.collector.rules.catalog import SHORT_FLAGS, WASTE_FLAGS
from gpufleet.collector.units import fmt_duration, fmt_size_short

if TYPE_CHECKING:
    from rich.console import Console

#: sort keys: key press -> the sort it picks (see :func:`sort_key`); ``<`` ``>`` step through them
SORTS: dict[str, str] = {"n": "host", "u": "util", "m": "memory", "w": "waste", "o": "user"}
HELP_KEYS = ("h", "?", "f1")
QUIT_KEYS = ("q", "Q", "f10", "eof")
HISTORY_WINDOW = 15 * 60.0  # seconds of history behind the open GPU's sparklines
HISTORY_REFRESH = 10.0  # seconds between history fetches while a GPU is open


@dataclass(slots=True)
class Row:
    """One selectable line: a GPU of a host, or a host without GPUs to show (down, none)."""

    host: HostView
    gpu: GpuView | None

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.host.name, None if self.gpu is None else self.gpu.index)

    def allocation(self) -> AllocationView | None:
        """The running Slurm job holding the GPU (used or not)."""
        job = self.gpu.allocated_to if self.gpu else None
        return next((a for a in self.host.allocations if a.job == job), None) if job is not None else None

    def users(self) -> list[str]:
        users = [p.user for p in (self.gpu.processes if self.gpu else []) if p.user]
        a = self.allocation()
        return users + [a.user] if a is not None and a.user and a.user not in users else users

    def jobs(self) -> list[str]:
        """What the GPU's processes run in (Slurm job, pod, container) and the Slurm job holding it."""
        out = [w for p in (self.gpu.processes if self.gpu else []) if (w := where_label(p)) is not None]
        a = self.allocation()
        return out + [allocation_label(a)] if a is not None else out

    def flags(self) -> list[str]:
        return list(self.gpu.flags if self.gpu else []) + list(self.host.flags)


def sort_key(name: str) -> Callable[[Row], Any]:
    """Rows ascending by this key: the most interesting first (busiest, fullest, most wasteful)."""
    def host(r: Row) -> Any:
        return (natural_key(r.host.name), -1 if r.gpu is None else r.gpu.index)

    if name == "util":
        return lambda r: (-(r.gpu.util or 0) if r.gpu and r.gpu.util is not None else 1, host(r))
    if name == "memory":
        return lambda r: (-(r.gpu.mem_used or 0) if r.gpu else 1, host(r))
    if name == "waste":
        def waste(r: Row) -> Any:
            g = r.gpu
            wasting = bool(WASTE_FLAGS.intersection(r.flags()))
            return (not wasting, -(g.mem_used or 0) if g and wasting else 0, host(r))
        return waste
    if name == "user":
        return lambda r: (not r.users(), sorted(r.users())[:1], host(r))
    return host


def matches(row: Row, text: str) -> bool:
    """Every term of ``text`` matches: ``host:``/``user:``/``flag:``/``tag:``/``model:``/``job:`` name one
    field, a bare term any of them (and the commands); globs work, otherwise case-insensitive substrings."""
    g = row.gpu
    fields = {
        "host": [row.host.name],
        "user": row.users(),
        "flag": row.flags(),
        "tag": list(row.host.tags),
        "model": [g.name] if g and g.name else [],
        "job": row.jobs(),
        "cmd": [p.command for p in (g.processes if g else []) if p.command],
    }
    for term in text.lower().split():
        key, sep, value = term.partition(":")
        values = fields.get(key, []) if sep and key in fields else [v for vs in fields.values() for v in vs]
        pattern = value if sep and key in fields else term
        if not pattern:
            continue
        glob = is_glob(pattern)
        if not any(fnmatch.fnmatchcase(v.lower(), pattern) if glob else pattern in v.lower() for v in values):
            return False
    return True


@dataclass
class TopState:
    """What the screen shows besides the data: sort, filter, selection, scroll, the open GPU."""

    sort: str = "host"
    reverse: bool = False
    filter: str = ""
    prompt: str | None = None  # the filter being typed (None: not typing); it applies as it is typed
    before: str = ""  # the filter before this edit (Esc puts it back)
    help: bool = False
    selected: tuple[str, int | None] | None = None
    offset: int = 0
    open: tuple[str, int] | None = None
    history: dict[str, Any] | None = None
    history_at: float = 0.0
    rows: list[Row] = field(default_factory=list)

    def visible_rows(self, view: FleetView) -> list[Row]:
        live = view.source == "live"
        rows = [
            Row(h, g)
            for h in view.hosts
            for g in (h.gpus if h.gpus and (h.status == "up" or not live) else [None])
        ]
        rows = [r for r in rows if matches(r, self.filter)] if self.filter else rows
        rows.sort(key=sort_key(self.sort), reverse=self.reverse)
        self.rows = rows
        return rows

    def index(self) -> int:
        for i, r in enumerate(self.rows):
            if r.key == self.selected:
                return i
        return 0

    def move(self, by: int) -> None:
        if not self.rows:
            return
        i = max(0, min(len(self.rows) - 1, self.index() + by))
        self.selected = self.rows[i].key

    def key(self, k: str, page: int) -> bool:
        """Apply one key press; False to quit."""
        if self.prompt is not None:
            if k == "enter":
                self.prompt = None
            elif k == "esc":
                self.filter, self.prompt = self.before, None
            elif k == "backspace":
                self.prompt = self.prompt[:-1]
            elif len(k) == 1 and k.isprintable():
                self.prompt += k
            if self.prompt is not None:
                self.filter = self.prompt.strip()  # as typed: the rows follow every key
            self.offset, self.selected = 0, None
            return True
        if self.help:  # any key closes the help (nvitop's "press any key to return")
            self.help = False
            return k not in QUIT_KEYS
        if k in QUIT_KEYS:
            return False
        if k in HELP_KEYS:
            self.help = True
            return True
        if self.open is not None:
            if k in ("esc", "enter", "backspace", "left"):
                self.open = None
            return True
        names = list(SORTS.values())
        # a new order starts at its top (the worst first), not wherever the old selection moved to
        if k in SORTS:
            self.sort, self.reverse, self.offset, self.selected = SORTS[k], False, 0, None
        elif k in ("r", "I"):
            self.reverse, self.offset, self.selected = not self.reverse, 0, None
        elif k in ("s", ">", "."):
            self.sort, self.reverse = names[(names.index(self.sort) + 1) % len(names)], False
            self.offset, self.selected = 0, None
        elif k in ("<", ","):
            self.sort, self.reverse = names[(names.index(self.sort) - 1) % len(names)], False
            self.offset, self.selected = 0, None
        elif k == "esc":  # back: out of a filter; top itself stays (q quits)
            self.filter, self.offset, self.selected = "", 0, None
        elif k == "/":
            self.prompt, self.before = self.filter, self.filter
        elif k in ("down", "j"):
            self.move(1)
        elif k in ("up", "k"):
            self.move(-1)
        elif k in ("pgdn", " "):
            self.move(page)
        elif k == "pgup":
            self.move(-page)
        elif k in ("home", "g"):
            self.move(-len(self.rows))
        elif k in ("end", "G"):
            self.move(len(self.rows))
        elif k in ("enter", "right") and self.rows:
            row = self.rows[self.index()]
            if row.gpu is not None:
                self.open, self.history = (row.host.name, row.gpu.index), None
                self.history_at = 0.0
        return True


# ------------------------------------------------------------------------------------------- screens

FOOTERS = (
    "h help  q quit  ↑↓ select  ⏎ open  / filter  Esc back  sort: n host u util m memory w waste o user "
    "<> column I reverse",
    "h help  q quit  ↑↓ select  ⏎ open  / filter  Esc back  sort: n u m w o  <>  I reverse",
    "h help  q quit  ⏎ open  / filter  Esc back  sort: n u m w o <> I reverse",
    "h help q quit ⏎ open / filter Esc back <> sort",
    "h help  q quit  / filter",
)
#: the help screen (h, ?, F1): the keys, and what the rows write short
HELP = (
    "gpufleet top: the fleet, one row per GPU (a host that is down is one row)",
    "",
    "  h ? F1    this help (any key returns)     q F10     quit",
    "  ↑ ↓ j k   select a row                    PgUp PgDn Home End g G   page, first, last",
    "  ⏎ →       open the GPU: its processes and history      Esc ← ⏎   back",
    "  /         filter as you type: words match host, user, flag, tag, model, command;",
    "            host: user: flag: tag: model: cmd: name one field; * and ? glob; ⏎ keeps, Esc undoes",
    "  Esc       clear the filter",
    "  n u m w o sort by host, util, memory, waste, user     < > , . s   the next or previous sort",
    "  I r       reverse the order",
    "",
    "Columns: TIME is how long the GPU's (first) process has run; GMEM the GPU memory it holds.",
    "FLAGS: the rules firing on the GPU, the worst first. Where a flag does not fit it is written short",
    "(the legend under the rows says which) and +N counts the flags that did not fit at all.",
    "The fleet line counts each GPU once: busy + wasted + idle + lost ... = GPUs.",
)


def footer(width: int, text: str | None = None) -> Line:
    if text is None:
        text = next((f for f in FOOTERS if cells(f) <= width), FOOTERS[-1])
    line = Line(text + " " * max(width - cells(text), 0), "reverse")
    return line.truncate(width)


def _selected(line: Line, width: int) -> Line:
    pad = width - line.cell_len()
    if pad > 0:
        line.append(" " * pad)
    line.spans = [(t, f"{s} reverse".strip()) for t, s in line.spans]
    return line


def list_screen(view: FleetView, st: TopState, width: int, height: int) -> list[Line]:
    lay = Layout(width, view)
    rows = st.visible_rows(view)
    head = [title_line(view, lay.width, "gpufleet top"), *totals_lines(view, lay.width), header(lay)]
    page = max(height - len(head) - 3, 1)  # under the rows: the legend, the state line, the keys
    if st.selected is None and rows:
        st.selected = rows[0].key
    i = st.index()
    if rows and st.selected != rows[i].key:  # the selected GPU went away (filter, host gone)
        st.selected = rows[i].key
    st.offset = min(max(st.offset, i - page + 1), i)
    st.offset = max(0, min(st.offset, max(len(rows) - page, 0)))
    now = view.generated_at
    out = list(head)
    for n, r in enumerate(rows[st.offset : st.offset + page], start=st.offset):
        line = host_row(lay, r.host, now) if r.gpu is None else gpu_row(lay, r.host, r.gpu)
        out.append(_selected(line, width) if n == i else line)
    if not rows:
        out.append(Line("no GPU matches the filter" if st.filter else "no hosts", "dim"))
    out += [Line()] * max(height - len(out) - 3, 0)
    out.append(legend(lay, width))
    state = f"sort: {st.sort} {'↑' if st.reverse else '↓'}"
    if st.filter:
        state += f" · filter: {st.filter}"
    total = sum(len(h.gpus) or 1 for h in view.hosts)
    state += f" · {i + 1 if rows else 0}/{len(rows)}" + (f" of {total}" if len(rows) != total else "")
    if st.prompt is not None:
        out.append(Line("filter as you type (host: user: flag: tag: model: job:; ⏎ keeps, Esc undoes): ",
                        "bold")
                   .append(st.prompt + "█").truncate(width))
    else:
        out.append(Line(state, "dim").truncate(width))
    out.append(footer(width))
    return out[:height]


def legend(lay: Layout, width: int) -> Line:
    """What the rows wrote short: the flags' short forms used, +N, and where the rest is explained; the
    longest form that fits."""
    used = sorted(getattr(lay.gauges, "shortened", ()) or ())
    short = ["short: " + ", ".join(f"{s}={SHORT_FLAGS[s]}" for s in used)] if used else []
    forms = [["flags worst first", *short, "+N: flags that did not fit", "h: every key and column"],
             [*short, "+N: more flags", "h: help"], ["+N: more flags · h: help"]]
    text = next((t for t in (" · ".join(f) for f in forms) if cells(t) <= width), " · ".join(forms[-1]))
    return Line(text, "dim").truncate(width)


def help_screen(width: int, height: int) -> list[Line]:
    """The keys and columns, wrapped to the screen (a key's words under its words, never cut)."""
    out = [Line(line, "bold cyan") for line in textwrap.wrap(HELP[0], width)]
    for t in HELP[1:]:
        indent = " " * 12 if t.startswith("  ") else ""
        out += [Line(line) for line in textwrap.wrap(t, width, subsequent_indent=indent)] or [Line()]
    out += [Line()] * max(height - len(out) - 1, 0)
    return out[: height - 1] + [footer(width, "any key returns  q quit")]


def detail_screen(view: FleetView, st: TopState, width: int, height: int) -> list[Line]:

    assert st.open is not None
    host = next((h for h in view.hosts if h.name == st.open[0]), None)
    gpu = next((g for g in host.gpus if g.index == st.open[1]), None) if host else None
    out = [title_line(view, width, f"gpufleet top › {st.open[0]} GPU {st.open[1]}")]
    if host is None or gpu is None:
        out.append(Line("this GPU is no longer in the fleet view", "yellow"))
    else:
        out.append(Line(f"{gpu.name or 'unknown model'}  {gpu.uuid}", "bold").truncate(width))
        bits = [f"util {'-' if gpu.util is None else f'{gpu.util}%'}",
                f"memory {fmt_mem_pair(gpu.mem_used, gpu.mem_total)}", f"temp {fmt_temp(gpu.temp)}"]
        if gpu.fan is not None:
            bits.append(f"fan {gpu.fan}%")
        if gpu.power is not None:
            bits.append(f"power {fmt_power(gpu.power, gpu.power_limit)}")
        bits.append(f"state {gpu.state}")
        out.append(Line("  ".join(bits)).truncate(width))
        if gpu.flags:
            out.append(Line("flags: ", "dim").append(" ".join(gpu.flags), "bold yellow").truncate(width))
        held = Row(host, gpu).allocation()
        if held is not None:
            out.append(_allocation_line(held, gpu.index).truncate(width))
        if gpu.error:
            out.append(Line(f"{gpu.fault or 'lost'}: {gpu.error}", "bold red").truncate(width))
        out.append(Line())
        spark_w = max(min(width - 26, 120), 10)
        series = [s for s in (st.history or {}).get("series", []) if s.get("index") == gpu.index]
        if st.history is None:
            out.append(Line("history: loading…", "dim"))
        elif not series or not series[0].get("points"):
            out.append(Line("history: no samples in the last 15 min yet", "dim"))
        else:

            s = convert.series(series[0])
            until = float(st.history["until"])
            # a short history fills the line instead of a sliver at its right end
            since = max(float(st.history["since"]), min(p.ts for p in s.points))
            spark_w = min(spark_w, len(s.points))  # no more cells than samples: no aliasing gaps
            util = bucket(s.points, since, until, spark_w, lambda p: p.util_mean)
            mem = bucket(s.points, since, until, spark_w,
                         lambda p: p.mem_used_max if p.mem_used_max is not None else p.mem_used_mean, "max")
            hi = float(s.memory_total or gpu.mem_total or 1)
            out.append(Line("util  ", "dim").append(sparkline(util, 0, 100), "green")
                       .append(f"  last {fmt_duration(until - since)}", "dim").truncate(width))
            out.append(Line("mem   ", "dim").append(sparkline(mem, 0, hi), "magenta").truncate(width))
        out.append(Line())
        out.extend(_process_lines(gpu, width))
    out += [Line()] * max(height - len(out) - 1, 0)
    out = out[: height - 1]
    out.append(footer(width, "Esc/⏎ back  q quit"))
    return out


def _allocation_line(a: AllocationView, index: int) -> Line:
    """``Slurm job 812 llama-pretrain (alice, nlp) holds GPUs 0-1 · uses 0 · unused 1``."""
    line = Line("Slurm job ", "dim").append(allocation_label(a), "bold")
    line.append(f" holds GPU{'s' if len(a.gpus) > 1 else ''} {fmt_indexes(a.gpus)}", "dim")
    line.append(f" · uses {fmt_indexes(a.used) or 'none'}", "dim")
    if a.unused:
        line.append(f" · unused {fmt_indexes(a.unused)}", "bold yellow" if index in a.unused else "yellow")
    return line


def _process_lines(gpu: GpuView, width: int) -> list[Line]:

    if not gpu.processes:
        return [Line("no processes on this GPU", "dim")]
    cols = [Col("PID", right=True), Col("USER", shrink=True), Col("GMEM", right=True), Col("SM", right=True),
            Col("TIME", right=True), Col("JOB / POD / CONTAINER", shrink=True, max=32)]
    rows: list[list[Cell]] = []
    for p in sorted(gpu.processes, key=lambda p: -(p.memory or 0)):
        where = where_label(p) or "-"
        if p.job and p.container and not p.pod_name:  # a Slurm job inside a container: both
            where += f" {p.container[:12]}"
        elif where == p.container:
            where = p.container[:12]
        rows.append([
            str(p.pid), (p.user or "?", "bold"), fmt_size_short(p.memory),
            "-" if p.sm_util is None else f"{p.sm_util}%", fmt_duration(p.running_for), where,
            (("<zombie> " if p.state == "Z" else "") + (p.command or ""), "red" if p.state == "Z" else ""),
        ])
    return grid_lines(cols, rows, width, tail="COMMAND", tail_min=16)


# ------------------------------------------------------------------------------------------- the loop


def run_top(console: Console, backend: Backend, interval: float, *, args: dict[str, Any]) -> None:
    """Until ``q``/Esc (exit 0) or Ctrl-C: refresh the view every ``interval``, redraw on every key."""
    from rich.live import Live
    from rich.text import Text

    if not (sys.stdin.isatty() and console.is_terminal):
        raise CliError("gpufleet top needs a terminal; use `gpufleet status` (or --json) in scripts", 2)
    st = TopState()
    # the first answer before the screen: a fallback's one-line notice (stored data) lands on the normal
    # screen, and a collector that is not there at all fails like `gpufleet status` does
    view: FleetView | None = status_view(backend, {"form": "rows", **args})
    error = ""
    next_fetch = time.monotonic() + interval
    try:
        with KeyReader() as keys, Live(console=console, screen=True, auto_refresh=False,
                                       redirect_stderr=False) as live:
            while True:
                now = time.monotonic()
                if now >= next_fetch:
                    next_fetch = now + interval
                    try:
                        view = status_view(backend, {"form": "rows", **args})
                        error = ""
                    except CliError as exc:  # collector restarting: keep the last view, say so
                        if exc.code == EXIT_DENIED:
                            raise
                        error = f"gpufleet: {exc} (retrying every {interval:g} s)"
                    if st.open is not None and now - st.history_at >= HISTORY_REFRESH:
                        st.history_at = now
                        st.history = _history(backend, *st.open)
                width, height = console.width, console.height
                if view is None:
                    live.update(Text(error or "gpufleet top: asking the collector…", "yellow"), refresh=True)
                else:
                    screen = help_screen(width, height) if st.help else None
                    lines = screen or (detail_screen if st.open else list_screen)(view, st, width, height)
                    if error:
                        lines[0] = Line(error, "yellow").truncate(width)
                    live.update(to_text(lines), refresh=True)
                k = keys.wait(max(0.0, next_fetch - time.monotonic()))
                if k is None:
                    continue
                was_open = st.open
                if not st.key(k, page=max(height - 7, 1)):
                    return
                if st.open is not None and st.open != was_open:
                    st.history_at = time.monotonic()
                    st.history = _history(backend, *st.open)
    except KeyboardInterrupt:
        pass


def _history(backend: Backend, host: str, gpu: int) -> dict[str, Any]:
    until = time.time()
    try:
        result: dict[str, Any] = backend.call(
            "history", host=host, gpu=gpu, since=until - HISTORY_WINDOW, until=until, max_points=240
        )
        return result
    except CliError as exc:
        return {"series": [], "since": until - HISTORY_WINDOW, "until": until, "error": str(exc)}


@click.command()
@where_options
@click.option("--host", "hosts", multiple=True, metavar="NAME", help="Only these hosts (globs work).")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Only hosts with one of these tags.")
@click.option("--user", "users", multiple=True, metavar="USER", help="Only GPUs these users hold.")
@click.option(
    "--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
    help="Seconds between refreshes.",
)
@pass_state
def top(
    state: State, hosts: tuple[str, ...], tags: tuple[str, ...], users: tuple[str, ...], interval: float
) -> None:
    """The fleet live and interactive: sort (n u m w o, < >), filter as you type (/), select a GPU (Enter)
    for its processes and history; h or ? for help. q quits, Esc goes back."""
    args = {"host": split_list(hosts) or None, "tag": split_list(tags) or None,
            "user": split_list(users) or None}
    run_top(state.console, state.backend(), interval, args={k: v for k, v in args.items() if v})
