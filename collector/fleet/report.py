"""The waste report: GPU-hours held, used and wasted per user and per host over a range, top wasters first.

Built from the store's hourly usage accounting (Store.usage_by_user, by_host=True), rendered as text (chat,
terminal), markdown (issues, wikis, Matrix) or JSON, and delivered through the same notifiers as alerts
(``gpufleet report --since 7d --send``, collector/notify/reports.py). It also says how much capacity sat free
(GPU-hours nobody held), which alerts fired and which faults the hosts reported in the range. Note: a user is
credited the whole GPU while holding memory on it, so two users sharing a GPU both count it; per-host sums can
exceed the host's physical GPU-hours. Where agents name Slurm jobs, the same GPU-hours (the same definition of
waste, store/usage.py) are also summed per Slurm account, partition and user, with the GPU-hours Slurm
allocated to running jobs and, of those, the hours no process of the job ran on the GPU (allocated but
unused: collector/fleet/accounting.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpufleet.collector.errors import QueryError
from gpufleet.collector.model.records import AlertRecord, CapacityRow, EventRow, SlurmUsageRow, UsageRow
from gpufleet.collector.rules.catalog import severity_rank
from gpufleet.collector.units import fmt_duration, fmt_pct, fmt_utc

ReportFormat = Literal["text", "markdown", "json"]
FORMATS: tuple[str, ...] = ("text", "markdown", "json")


class UsageSource(Protocol):
    """What the report reads: the store (or, in tests, a stand-in with the same four reads)."""

    async def usage_by_user(self, *, since: float, until: float, host: str | None = None,
                            by_host: bool = False) -> list[UsageRow]: ...
    async def capacity(self, *, since: float, until: float, host: str | None = None) -> list[CapacityRow]: ...
    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[AlertRecord]: ...
    async def events(self, *, host: str | None = None, since: float, until: float) -> list[EventRow]: ...
    async def slurm_usage(self, group: str, *, since: float, until: float,
                          host: str | None = None) -> list[SlurmUsageRow]: ...


#: Event kinds that are hardware or driver faults (the report counts them per host).
FAULT_KINDS: tuple[str, ...] = ("xid", "gpu_lost", "driver_error", "ecc")


@dataclass(slots=True)
class AlertCount:
    """How many alerts of one rule and severity were firing at some point of the range."""

    rule: str
    severity: str
    count: int
    hosts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "count": self.count, "hosts": self.hosts}


@dataclass(slots=True)
class UsageLine:
    """GPU-hours of one user, one host, or everything."""

    name: str
    held: float = 0.0
    used: float = 0.0
    wasted: float = 0.0
    #: Slurm lines only: GPU-hours allocated to running jobs, and of those unused (accounting.py)
    allocated: float = 0.0
    unused: float = 0.0

    @property
    def used_pct(self) -> float:
        return 100.0 * self.used / self.held if self.held > 0 else 0.0

    @property
    def wasted_pct(self) -> float:
        return 100.0 * self.wasted / self.held if self.held > 0 else 0.0

    @property
    def unused_pct(self) -> float:
        return 100.0 * self.unused / self.allocated if self.allocated > 0 else 0.0

    def add(self, row: UsageRow | SlurmUsageRow) -> None:
        self.held += row.gpu_hours_held
        self.used += row.gpu_hours_used
        self.wasted += row.gpu_hours_wasted
        if isinstance(row, SlurmUsageRow):
            self.allocated += row.gpu_hours_allocated
            self.unused += row.gpu_hours_unused

    def add_line(self, other: UsageLine) -> None:
        self.held += other.held
        self.used += other.used
        self.wasted += other.wasted
        self.allocated += other.allocated
        self.unused += other.unused

    def as_dict(self, slurm: bool = False) -> dict[str, Any]:
        out = {"name": self.name, "gpu_hours_held": round(self.held, 3),
               "gpu_hours_used": round(self.used, 3), "gpu_hours_wasted": round(self.wasted, 3),
               "used_pct": round(self.used_pct, 1), "wasted_pct": round(self.wasted_pct, 1)}
        if slurm:
            out.update(gpu_hours_allocated=round(self.allocated, 3), gpu_hours_unused=round(self.unused, 3),
                       unused_pct=round(self.unused_pct, 1))
        return out


@dataclass(slots=True)
class WasteReport:
    since: float
    until: float
    host: str | None
    rows: list[UsageRow] = field(default_factory=list)  # per (user, host)
    by_user: list[UsageLine] = field(default_factory=list)  # most wasted first
    by_host: list[UsageLine] = field(default_factory=list)  # most wasted first
    total: UsageLine = field(default_factory=lambda: UsageLine("total"))
    top_wasters: list[UsageLine] = field(default_factory=list)
    observed: float = 0.0  # GPU-hours the GPUs were sampled
    free: float = 0.0  # of those, nothing allocated: idle capacity
    alerts: list[AlertCount] = field(default_factory=list)  # most severe first
    faults: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> fault kind -> count
    generated_at: float = 0.0
    #: Slurm "account" / "partition" -> lines, most wasted first; empty where no agent names Slurm jobs
    slurm: dict[str, list[UsageLine]] = field(default_factory=dict)

    @property
    def free_pct(self) -> float:
        return 100.0 * self.free / self.observed if self.observed > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since, "until": self.until, "host": self.host, "generated_at": self.generated_at,
            "total": self.total.as_dict(),
            "top_wasters": [u.as_dict() for u in self.top_wasters],
            "by_user": [u.as_dict() for u in self.by_user],
            "by_host": [h.as_dict() for h in self.by_host],
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "capacity": {"gpu_hours_observed": round(self.observed, 3), "gpu_hours_free": round(self.free, 3),
                         "free_pct": round(self.free_pct, 1)},
            "alerts": [a.as_dict() for a in self.alerts],
            "faults": self.faults,
            **{f"by_slurm_{group}": [u.as_dict(slurm=True) for u in lines]
               for group, lines in self.slurm.items()},
        }


def _sorted(lines: dict[str, UsageLine]) -> list[UsageLine]:
    """Most wasted first (a Slurm line's unused allocated hours count as waste here), then most held."""
    return sorted(lines.values(), key=lambda u: (-(u.wasted + u.unused), -(u.held + u.allocated), u.name))


TOP_WASTERS = 5  # users named in the headline list


async def build_report(store: UsageSource, *, since: float, until: float, host: str | None = None,
                       top: int = TOP_WASTERS, now: float | None = None) -> WasteReport:
    """Aggregate the store's per (user, host) GPU-hours into per-user, per-host and total lines."""
    rows = await store.usage_by_user(since=since, until=until, host=host, by_host=True)
    cap = await store.capacity(since=since, until=until, host=host)
    alerts = await store.load_alerts(active_only=False, since=since)
    events = await store.events(host=host, since=since, until=until)
    slurm: dict[str, list[UsageLine]] = {}
    for group in SLURM_GROUPS:
        found = await store.slurm_usage(group, since=since, until=until, host=host)
        if found:
            slurm[group] = [_line(r.name, r) for r in found]
    return _assemble(since=since, until=until, host=host, rows=rows, top=top,
                     observed=sum(c.gpu_hours_observed for c in cap), free=sum(c.gpu_hours_free for c in cap),
                     alerts=_alert_counts(alerts, since=since, until=until, host=host),
                     faults=_faults(events), generated_at=time.time() if now is None else now, slurm=slurm)


#: The Slurm groupings the report sums GPU-hours by (Store.slurm_usage): the job's account, partition and
#: user as Slurm says them.
SLURM_GROUPS: tuple[str, ...] = ("account", "partition", "user")


def _line(name: str, row: SlurmUsageRow) -> UsageLine:
    line = UsageLine(name)
    line.add(row)
    return line


def _assemble(*, since: float, until: float, host: str | None, rows: list[UsageRow], observed: float,
              free: float, alerts: list[AlertCount], faults: dict[str, dict[str, int]], generated_at: float,
              top: int = TOP_WASTERS, slurm: Mapping[str, list[UsageLine]] | None = None) -> WasteReport:
    """The report of per (user, host) rows: the per-user, per-host and total lines counted from them."""
    users: dict[str, UsageLine] = {}
    hosts: dict[str, UsageLine] = {}
    total = UsageLine("total")
    for row in rows:
        users.setdefault(row.user, UsageLine(row.user)).add(row)
        hosts.setdefault(row.host or "?", UsageLine(row.host or "?")).add(row)
        total.add(row)
    by_user = _sorted(users)
    return WasteReport(since=since, until=until, host=host, rows=rows, by_user=by_user,
                       by_host=_sorted(hosts), total=total,
                       top_wasters=[u for u in by_user if u.wasted > 0][:top], observed=observed, free=free,
                       alerts=_ordered(alerts), faults=dict(sorted(faults.items())),
                       generated_at=generated_at,
                       slurm={g: _sorted({u.name: u for u in lines})
                              for g, lines in (slurm or {}).items() if lines})


def report_from_dict(d: Mapping[str, Any]) -> WasteReport:
    """A report back from its JSON form (:meth:`WasteReport.as_dict`), as the CLI reads each collector's;
    the lines are counted again from the rows."""
    try:
        rows = [UsageRow(user=str(r["user"]), host=r.get("host"), gpu_hours_held=float(r["gpu_hours_held"]),
                         gpu_hours_used=float(r["gpu_hours_used"]),
                         gpu_hours_wasted=float(r["gpu_hours_wasted"])) for r in d.get("rows") or []]
        cap = d.get("capacity") or {}
        alerts = [AlertCount(str(a["rule"]), str(a["severity"]), int(a["count"]), list(a.get("hosts") or []))
                  for a in d.get("alerts") or []]
        faults = {str(h): {str(k): int(n) for k, n in kinds.items()}
                  for h, kinds in (d.get("faults") or {}).items()}
        slurm = {g: [UsageLine(str(u["name"]), float(u["gpu_hours_held"]), float(u["gpu_hours_used"]),
                               float(u["gpu_hours_wasted"]), float(u.get("gpu_hours_allocated") or 0.0),
                               float(u.get("gpu_hours_unused") or 0.0))
                     for u in d.get(f"by_slurm_{g}") or []]
                 for g in SLURM_GROUPS}
        return _assemble(since=float(d["since"]), until=float(d["until"]), host=d.get("host"), rows=rows,
                         observed=float(cap.get("gpu_hours_observed", 0.0)),
                         free=float(cap.get("gpu_hours_free", 0.0)), alerts=alerts, faults=faults,
                         generated_at=float(d.get("generated_at") or 0.0), slurm=slurm)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise QueryError(f"malformed report: {exc}") from None


def merge_reports(reports: Sequence[WasteReport]) -> WasteReport:
    """One report of several collectors' reports over disjoint hosts (shards; one answer per shard, the
    caller drops replicas): GPU-hours summed per (user, host), capacity, alerts and faults added up."""
    rows: dict[tuple[str, str | None], UsageRow] = {}
    alerts: dict[tuple[str, str], AlertCount] = {}
    faults: dict[str, dict[str, int]] = {}
    slurm: dict[str, dict[str, UsageLine]] = {}
    for rep in reports:
        for group, lines in rep.slurm.items():
            mine_lines = slurm.setdefault(group, {})
            for u in lines:
                mine_lines.setdefault(u.name, UsageLine(u.name)).add_line(u)
        for r in rep.rows:
            got = rows.setdefault((r.user, r.host), UsageRow(r.user, r.host, 0.0, 0.0, 0.0))
            got.gpu_hours_held += r.gpu_hours_held
            got.gpu_hours_used += r.gpu_hours_used
            got.gpu_hours_wasted += r.gpu_hours_wasted
        for a in rep.alerts:
            c = alerts.setdefault((a.rule, a.severity), AlertCount(a.rule, a.severity, 0))
            c.count += a.count
            c.hosts.extend(h for h in a.hosts if h not in c.hosts)
        for host, kinds in rep.faults.items():
            mine = faults.setdefault(host, {})
            for kind, n in kinds.items():
                mine[kind] = mine.get(kind, 0) + n
    first = reports[0]
    return _assemble(since=min(r.since for r in reports), until=max(r.until for r in reports),
                     host=first.host, rows=sorted(rows.values(), key=lambda r: (r.user, r.host or "")),
                     observed=sum(r.observed for r in reports), free=sum(r.free for r in reports),
                     alerts=list(alerts.values()), faults=faults,
                     generated_at=max(r.generated_at for r in reports),
                     slurm={g: list(lines.values()) for g, lines in slurm.items()})


def _ordered(counts: Sequence[AlertCount]) -> list[AlertCount]:
    """Most severe first, then the most frequent."""
    return sorted(counts, key=lambda c: (-severity_rank(c.severity), -c.count, c.rule))


def _alert_counts(alerts: Sequence[AlertRecord], *, since: float, until: float,
                  host: str | None) -> list[AlertCount]:
    """Alerts that fired and were firing at some point of [since, until], per rule and severity."""
    counts: dict[tuple[str, str], AlertCount] = {}
    for a in alerts:
        if a.fired_at is None or a.fired_at > until or (a.resolved_at is not None and a.resolved_at < since):
            continue
        where = a.labels.get("host", "")
        if host is not None and where != host:
            continue
        c = counts.setdefault((a.rule, a.severity), AlertCount(a.rule, a.severity, 0))
        c.count += 1
        if where and where not in c.hosts:
            c.hosts.append(where)
    return _ordered(list(counts.values()))


def _faults(events: Sequence[EventRow]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for e in events:
        if e.kind in FAULT_KINDS:
            kinds = out.setdefault(e.host, {})
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------ render


def report_title(report: WasteReport) -> str:
    scope = report.host or "all hosts"
    return (f"gpufleet waste report, {scope}: {fmt_utc(report.since)} to {fmt_utc(report.until)} "
            f"({fmt_duration(report.until - report.since)})")


def _decimals(values: Sequence[float]) -> int:
    """One precision per table: two decimals when every figure is small (a short report never reads
    "0.0 wasted" beside "0.02 held"), else one."""
    return 2 if all(abs(v) < 10 for v in values) else 1


def _hours(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def _headline(report: WasteReport) -> str:
    t = report.total
    if t.held <= 0:
        return "No GPU memory was held in this period."
    d = _decimals([t.held, t.used, t.wasted])
    return (f"{_hours(t.held, d)} GPU-hours held, {_hours(t.used, d)} used ({fmt_pct(t.used_pct)}), "
            f"{_hours(t.wasted, d)} wasted ({fmt_pct(t.wasted_pct)})")


def _capacity_line(report: WasteReport) -> str | None:
    if report.observed <= 0:
        return None
    d = _decimals([report.free, report.observed])
    return (f"Idle capacity: {_hours(report.free, d)} GPU-hours nobody held "
            f"({fmt_pct(report.free_pct)} of {_hours(report.observed, d)} GPU-hours observed)")


def _alert_lines(report: WasteReport) -> list[str]:
    out = []
    for a in report.alerts:
        where = ", ".join(a.hosts[:5]) + (f" and {len(a.hosts) - 5} more" if len(a.hosts) > 5 else "")
        out.append(f"- {a.rule} ({a.severity}): {a.count}" + (f" on {where}" if where else ""))
    return out


def _fault_lines(report: WasteReport) -> list[str]:
    return [f"- {h}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            for h, kinds in report.faults.items()]


_COLUMNS = ("HELD", "USED", "WASTED", "WASTED %")


def _cells(u: UsageLine, d: int) -> list[str]:
    return [_hours(u.held, d), _hours(u.used, d), _hours(u.wasted, d), fmt_pct(u.wasted_pct)]


_ALLOCATION_COLUMNS = ("ALLOCATED", "UNUSED", "UNUSED %")


def _table_decimals(lines: list[UsageLine]) -> int:
    return _decimals([v for u in lines for v in (u.held, u.used, u.wasted, u.allocated, u.unused)])


def _allocations(lines: list[UsageLine]) -> bool:
    """Do the lines carry Slurm allocations (then the table shows ALLOCATED, UNUSED, UNUSED %)?"""
    return any(u.allocated > 0 for u in lines)


def _row(u: UsageLine, d: int, allocations: bool) -> list[str]:
    cells = _cells(u, d)
    if allocations:
        cells += [_hours(u.allocated, d), _hours(u.unused, d), fmt_pct(u.unused_pct)]
    return cells


def _text_table(first: str, lines: list[UsageLine]) -> list[str]:
    d = _table_decimals(lines)
    alloc = _allocations(lines)
    body = [[u.name, *_row(u, d, alloc)] for u in lines]
    head = [first, *_COLUMNS, *(_ALLOCATION_COLUMNS if alloc else ())]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def fmt(r: list[str]) -> str:
        return "  ".join([r[0].ljust(widths[0]), *(c.rjust(widths[i + 1]) for i, c in enumerate(r[1:]))])

    return [fmt(head), *(fmt(r) for r in body)]


def _md_table(first: str, lines: list[UsageLine]) -> list[str]:
    alloc = _allocations(lines)
    columns = (*_COLUMNS, *(_ALLOCATION_COLUMNS if alloc else ()))
    out = [f"| {first} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    d = _table_decimals(lines)
    out += ["| " + " | ".join([u.name.replace("|", "\\|"), *_row(u, d, alloc)]) + " |" for u in lines]
    return out


def _slurm_line(report: WasteReport) -> str | None:
    """``Slurm: 4.00 GPU-hours allocated to running jobs, 2.00 of them unused (50 %)``: every group sums
    the same jobs, so any one of them gives the total."""
    lines = next(iter(report.slurm.values()), [])
    allocated = sum(u.allocated for u in lines)
    if allocated <= 0:
        return None
    unused = sum(u.unused for u in lines)
    d = _decimals([allocated, unused])
    return (f"Slurm: {_hours(allocated, d)} GPU-hours allocated to running jobs, {_hours(unused, d)} of them "
            f"unused ({fmt_pct(100.0 * unused / allocated)}): GPUs no process of their job ran on")


def render_report(report: WasteReport, fmt: ReportFormat = "text") -> str:
    if fmt == "json":
        return json.dumps(report.as_dict(), indent=2, sort_keys=True)
    if fmt not in ("text", "markdown"):
        raise ValueError(f"unknown report format {fmt!r} (use one of {', '.join(FORMATS)})")
    md = fmt == "markdown"
    out = [f"## {report_title(report)}" if md else report_title(report), "", _headline(report)]
    if report.top_wasters:
        out += ["", "### Top wasters" if md else "Top wasters:"]
        d = _table_decimals(report.top_wasters)
        for i, u in enumerate(report.top_wasters, 1):
            name = f"**{u.name}**" if md else u.name
            out.append(f"{i}. {name}: {_hours(u.wasted, d)} GPU-hours wasted of "
                       f"{_hours(u.held, d)} held ({fmt_pct(u.wasted_pct)})")
    table = _md_table if md else _text_table
    if report.by_user:
        out += ["", "### By user" if md else "By user (GPU-hours):", *table("USER", report.by_user)]
    if report.by_host:
        out += ["", "### By host" if md else "By host (GPU-hours):", *table("HOST", report.by_host)]
    slurm = _slurm_line(report)
    if slurm:
        out += ["", slurm]
    for group, lines in report.slurm.items():
        title = f"By Slurm {group}"
        out += ["", f"### {title}" if md else f"{title} (GPU-hours):", *table(group.upper(), lines)]
    capacity = _capacity_line(report)
    if capacity:
        out += ["", capacity]
    out += ["", "### Alerts" if md else "Alerts that fired:", *(_alert_lines(report) or ["- none"])]
    out += ["", "### Faults" if md else "Faults (Xid, lost GPUs, driver errors):",
            *(_fault_lines(report) or ["- none"])]
    return "\n".join(out) + "\n"
