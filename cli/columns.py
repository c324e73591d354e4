"""The status screen's columns: which ones a width keeps and how wide each is (``gpufleet status``, ``top``,
the demo).

One priority for what a narrow screen keeps (issue 36): the host, the GPU, the user and the flags are never
cut; the GPU's util and memory, its temperature, how long its process has run and the memory it holds come
next; the command, the bars and the power (then the PID, the model, the fan) take what is left, in that
order. A flag that does not fit its column is written in its short form (the rule catalog's), never cut.
With no width (a pipe, a file) every column has its natural width: nothing is cut.

Widths are measured once per view (:func:`measure`: one pass over its GPUs and processes), not per line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.cli.lines import UNBOUNDED, cells, cut
from gpufleet.collector.model.views import (
    FleetView,
    GpuView,
    HostView,
    ProcView,
    allocation_label,
    where_label,
)
from gpufleet.collector.rules.catalog import short_flag
from gpufleet.collector.units import GIB, fmt_duration, fmt_size_short

GAP = 1
#: the widest a host or user name gets on a screen of bounded width (past it, the name is cut)
MAX_NAME = 28
MIN_COMMAND = 12  # a command column narrower than this says nothing: none then
HEADERS = {"host": "HOST", "gpu": "GPU", "model": "MODEL", "util": "UTIL", "mem": "MEMORY", "temp": "TEMP",
           "fan": "FAN", "power": "POWER", "pid": "PID", "user": "USER", "cmd": "COMMAND", "pmem": "GMEM",
           "run": "TIME", "flags": "FLAGS"}


def fmt_mem_pair(used: int | None, total: int | None) -> str:
    """``31/80G`` (used/total GiB; one decimal on cards under 10 GiB): the one memory style of the CLI and
    the web page (its app.js writes the same; tests/cli/test_demo.py compares them)."""
    if used is None and total is None:
        return "-"
    if total is not None and total < 10 * GIB:
        return f"{(used or 0) / GIB:.1f}/{total / GIB:.0f}G"
    u = "?" if used is None else f"{used / GIB:.0f}"
    t = "?" if total is None else f"{total / GIB:.0f}"
    return f"{u}/{t}G"


def fmt_temp(temp: float | None) -> str:
    """``62°C``: the one temperature style of every view."""
    return "-" if temp is None else f"{temp:.0f}°C"


def fmt_power(power: float | None, limit: float | None) -> str:
    if power is None:
        return "-"
    return f"{power:.0f}/{limit:.0f}W" if limit else f"{power:.0f}W"


def flag_text(flags: Sequence[str], width: int | None) -> tuple[str, list[str]]:
    """The flags as they fit ``width`` cells: their names, else their short forms, else as many short forms
    as fit and ``+N`` for the rest (never a cut name). Returns the text and the short forms used."""
    full = " ".join(flags)
    if width is None or cells(full) <= width:
        return full, []
    shorts = [short_flag(f) for f in flags]
    out: list[str] = []
    for i, s in enumerate(shorts):
        rest = len(shorts) - i - 1
        if cells(" ".join([*out, s]) + (f" +{rest}" if rest else "")) > width:
            break
        out.append(s)
    hidden = len(shorts) - len(out)
    text = " ".join([*out, *([f"+{hidden}"] if hidden else [])])
    return text, [s for s, f in zip(shorts, flags, strict=True) if s != f and s in out]


@dataclass(slots=True)
class Measure:
    """The natural width of each column over one view (what it takes to cut nothing)."""

    host: int = 4
    gpu: int = 1
    user: int = 1
    cmd: int = 0
    mem: int = 1
    temp: int = 1
    power: int = 1
    pmem: int = 1
    run: int = 1
    pid: int = 1
    model: int = 1
    flags: int = 0  # every row's flags in full
    flags_short: int = 0  # ... in their short forms
    held: int = 0  # the longest "unused by Slurm job ..." line, which takes the process columns' place


def unused_text(host: HostView, g: GpuView) -> str | None:
    """What the process columns say of a GPU a running Slurm job holds with nothing on it, else None."""
    if g.processes or g.allocated_to is None:
        return None
    job = next((a for a in host.allocations if a.job == g.allocated_to), None)
    return f"unused by Slurm job {allocation_label(job) if job is not None else g.allocated_to}"


def command_text(p: ProcView, *, tags: bool) -> tuple[str, str | None]:
    """A process's command cell before fitting: ``<zombie> `` and the command (or ``pid N``), and the job
    or container tag shown after it where there is room (``tags``: any job; else a named Slurm job only)."""
    prefix = "<zombie> " if p.state == "Z" else ""
    return prefix + (p.command or f"pid {p.pid}"), where_label(p, tags)


def measure(view: FleetView) -> Measure:
    """One pass over the view's GPUs and processes, formatting each distinct value once (a fleet repeats
    its flags, models, memory sizes, temperatures and commands a lot: 8,000 GPUs, a few hundred values)."""
    m = Measure(host=max((cells(h.name) for h in view.hosts), default=4))
    flag_sets: set[tuple[str, ...]] = set()
    models: set[str] = set()
    mems: set[tuple[int | None, int | None]] = set()
    temps: set[int | None] = set()
    powers: set[tuple[float | None, float | None]] = set()
    users: set[str | None] = set()
    pmems: set[int | None] = set()
    # what a command cell shows: command (or pid), state, and what command_text tags it with
    commands: set[tuple[str | None, int, str | None, str | None, str | None, str | None, str | None,
                        str | None, str | None]] = set()
    longest_run, max_pid, max_index = 0.0, 0, 0
    for h in view.hosts:
        for i, g in enumerate(h.gpus):
            max_index = max(max_index, g.index)
            flags = g.flags
            if i == 0 and h.flags:
                flags = [*flags, *(f for f in h.flags if f not in flags)]
            if flags:
                flag_sets.add(tuple(flags))
            if g.name:
                models.add(g.name)
            if g.error:
                continue
            held = unused_text(h, g)
            if held is not None:
                m.held = max(m.held, cells(held))
            mems.add((g.mem_used, g.mem_total))
            temps.add(g.temp)
            powers.add((None if g.power is None else round(g.power), g.power_limit))
            for p in g.processes:
                users.add(p.user)
                pmems.add(p.memory)
                max_pid = max(max_pid, p.pid)
                if p.running_for is not None and p.running_for > longest_run:
                    longest_run = p.running_for
                commands.add((p.command, p.pid if not p.command else 0, p.state, p.job, p.job_name,
                              p.container, p.pod_namespace, p.pod_name, p.container_name))
        if len(h.gpus) > 1:  # a host's summary line (a short screen folds it) sums its memory
            used = [g.mem_used for g in h.gpus if not g.error and g.mem_used is not None]
            total = [g.mem_total for g in h.gpus if not g.error and g.mem_total is not None]
            mems.add((sum(used) if used else None, sum(total) if total else None))
    m.gpu = len(str(max_index))
    for names in flag_sets:
        m.flags = max(m.flags, len(" ".join(names)))
        m.flags_short = max(m.flags_short, len(" ".join(short_flag(f) for f in names)))
    m.model = max((cells(n.removeprefix("NVIDIA ").removeprefix("GeForce ")) for n in models), default=1)
    m.mem = max((len(fmt_mem_pair(u, t)) for u, t in mems), default=1)
    m.temp = max((len(fmt_temp(t)) for t in temps), default=1)
    m.power = max((len(fmt_power(p, lim)) for p, lim in powers), default=1)
    m.user = max((cells(u or "?") for u in users), default=1)
    m.pmem = max((len(fmt_size_short(b)) for b in pmems), default=1)
    m.pid = len(str(max_pid))
    m.run = 6 if longest_run >= 3600 else len(fmt_duration(longest_run))  # "23h59m", "10d00h": 6 at most
    for command, pid, state, job, job_name, container, namespace, pod, container_name in commands:
        p = ProcView(pid, None, command, None, None, state, None, container, job, job_name,
                     pod_namespace=namespace, pod_name=pod, container_name=container_name)
        text, where = command_text(p, tags=True)
        m.cmd = max(m.cmd, cells(text) + (cells(where) + 3 if where else 0))
    return m


class Layout:
    """Column widths for one view at one width (``None``: no limit, every column whole); 0 = not shown."""

    def __init__(self, width: int | None, view: FleetView) -> None:
        m = measure(view)
        self.width = max(width, 40) if width is not None and width < UNBOUNDED else None
        bounded = self.width is not None
        name_cap = MAX_NAME if bounded else 1 << 20
        head = {k: len(v) for k, v in HEADERS.items()}
        self.host = max(min(m.host, name_cap), head["host"])
        self.gpu = max(m.gpu, head["gpu"])
        self.user = max(min(m.user, name_cap), head["user"])
        self.mtext = max(m.mem, head["mem"])
        self.temp = max(m.temp, head["temp"])
        self.pct = 4  # "100%"
        self.full_flags = max(m.flags, head["flags"])
        self.bar = self.mbar = self.power = self.pid = self.model = self.fan = self.cmd = 0
        self.pmem = self.run = 0
        nat_pmem, nat_run = max(m.pmem, head["pmem"]), max(m.run, head["run"])
        nat_power, nat_pid = max(m.power, head["power"]), max(m.pid, head["pid"])
        nat_model = min(max(m.model, head["model"]), 20)
        if self.width is None:  # a pipe or a file: everything, whole
            self.flags = self.full_flags
            self.pmem, self.run, self.cmd = nat_pmem, nat_run, max(m.cmd, head["cmd"])
            self.bar = self.mbar = 10
            self.power, self.pid, self.model, self.fan = nat_power, nat_pid, max(m.model, head["model"]), 4
            self.cmd = max(self.cmd, m.held + 1 - self._procs_besides_cmd())
        else:
            essential = self._used()
            short = max(m.flags_short, head["flags"])
            # the flags whole where they fit, else short forms, else what is left (then "+N")
            self.flags = (self.full_flags if essential + self.full_flags <= self.width
                          else short if essential + short <= self.width
                          else max(self.width - essential, head["flags"]))
            self._extras(m.cmd, nat_pmem, nat_run, nat_power, nat_pid, nat_model)
            if self.cmd:  # what room is left, to an unused GPU's "unused by Slurm job ..." whole
                room = self.width - self._used() - self.flags
                self.cmd += max(min(room, m.held + 1 - self._procs_besides_cmd() - self.cmd), 0)
        # any job / container tag after the command, where the longest command fits with its tag
        self.tags = self.width is None or self.cmd >= min(40, m.cmd)
        #: cells before the process columns (host .. power) with their gaps
        self.left = sum(w + GAP for w in (self.host, self.gpu, self.model, self.util, self.mem, self.temp,
                                          self.fan, self.power) if w)
        #: cells of the process columns (PID, user, command, memory, time) with their gaps
        self.procs = sum(w + GAP for w in (self.pid, self.user, self.cmd, self.pmem, self.run) if w)
        #: every line fits without a cut
        self.fits = self.width is None or self._used() + self.flags <= self.width
        self.gauges: object | None = None  # render_status's memoized cells of this layout, made on first use

    @property
    def util(self) -> int:
        return self.pct + (self.bar + 1 if self.bar else 0)

    @property
    def mem(self) -> int:
        return self.mtext + (self.mbar + 1 if self.mbar else 0)

    def _procs_besides_cmd(self) -> int:
        """Cells of the process columns other than the command, with every process column's gap (the
        process columns' text is cut one short of them: its last gap)."""
        return sum(w for w in (self.pid, self.user, self.pmem, self.run) if w) + GAP * (
            sum(1 for w in (self.pid, self.user, self.cmd or 1, self.pmem, self.run) if w))

    def _used(self) -> int:
        """Cells the columns before the flags take, gaps included."""
        cols = (self.host, self.gpu, self.model, self.util, self.mem, self.temp, self.fan, self.power,
                self.pid, self.user, self.cmd, self.pmem, self.run)
        return sum(w + GAP for w in cols if w)

    def _extras(self, cmd: int, pmem: int, run: int, power: int, pid: int, model: int) -> None:
        """Give the room the essentials leave to the rest, in the order of the module docstring."""
        assert self.width is not None
        room = self.width - self._used() - self.flags

        def take(cost: int) -> bool:
            nonlocal room
            if cost <= room:
                room -= cost
                return True
            return False

        if take(run + GAP):
            self.run = run
        if take(pmem + GAP):
            self.pmem = pmem
        if cmd and take(MIN_COMMAND + GAP):
            self.cmd = MIN_COMMAND
            grow = max(min(room, 24 - self.cmd, cmd - self.cmd), 0)
            room, self.cmd = room - grow, self.cmd + grow
        if take(4 + GAP + 3 + GAP):  # the util and memory bars, as a pair
            self.bar, self.mbar = 4, 3
        if take(power + GAP):
            self.power = power
        if self.bar and take(2 + 3):
            self.bar = self.mbar = 6
        if self.width >= 130 and take(pid + GAP):
            self.pid = pid
        if self.width >= 170 and take(model + GAP):
            self.model = model
        if self.width >= 180 and take(4 + GAP):
            self.fan = 4
        if self.width >= 140 and self.bar == 6 and take(4 + 4):
            self.bar = self.mbar = 10
        if self.cmd:  # the rest, up to the longest command (the flags need no more than they have)
            grow = min(room, max(cmd - self.cmd, 0))
            self.cmd += grow

    def duration(self, seconds: float | None) -> str:
        return fmt_duration(seconds)

    def flags_fit(self, flags: Sequence[str]) -> tuple[str, list[str]]:
        """A row's flags in its column (:func:`flag_text`)."""
        return flag_text(flags, None if self.width is None else self.flags)


def fit(text: str, width: int, align: str = "left") -> str:
    """Pad or cut ``text`` to exactly ``width`` cells (a cut ends with ``…``)."""
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
