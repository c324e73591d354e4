"""``gpufleet alerts`` (firing/pending, informational, recently resolved, silences) and ``gpufleet silence
list``.

One line per problem (collector/model/problems.py): a job's idle peers and its wasted GPUs are one row naming
its GPUs (``1,2,3``), as they are one notification. Informational alerts (capacity, a note for a user) are
listed apart and not counted as firing. The host, GPU, user and flag columns are never cut; the summary says
what the columns do not (the place it names is dropped: the columns say it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gpufleet.cli import convert
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.timeparse import fmt_ts
from gpufleet.collector.model.problems import Problem, problems
from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.rules.catalog import SEVERITIES, SEVERITY_STYLES, flag_name
from gpufleet.collector.units import fmt_duration
from rich.console import Group, RenderableType
from rich.text import Text

STATE_STYLES = {"firing": "bold red", "pending": "yellow", "resolved": "green", "silenced": "dim"}

#: the columns both alert tables have: which flags, on which host, GPUs and user
WHAT_AND_WHERE = (Col("FLAGS"), Col("HOST"), Col("GPU", right=True), Col("USER"))


def rule_label(rule: str) -> str:
    """``overheating (hot)``: the rule name and, where it differs, the flag the status screen shows."""
    flag = flag_name(rule)
    return rule if flag == rule else f"{rule} ({flag})"


def place(labels: dict[str, str]) -> str:
    """``gpu-node-03 GPU 0`` (or the host alone): where an alert is, as its summary says it."""
    host, gpu = labels.get("host", ""), labels.get("gpu")
    return f"{host} GPU {gpu}" if host and gpu is not None else host


def unplaced(summary: str, labels: dict[str, str]) -> str:
    """The summary without the place the columns already name (``gpu-node-07 GPU 1 at 90°C`` -> ``at
    90°C``; ``... holds 40 GiB on n3 GPU 0 at 1 %`` -> ``... holds 40 GiB at 1 %``)."""
    where = place(labels)
    if not where:
        return summary
    for said in (f" on {where}", f"{where}: ", f"{where} "):
        if said.startswith(" ") and said in summary:
            return summary.replace(said, "", 1)
        if summary.startswith(said):
            return summary[len(said):]
    return summary


def _what_and_where(p: Problem) -> list[Cell]:
    return [(" ".join(p.flags), "bold"), p.hosts or "-", p.gpus or "-", p.user]


def _state(p: Problem, muted: Collection[str]) -> Cell:
    """The severity of a firing problem (the worst of its alerts), else pending or silenced."""
    if all(a.fingerprint in muted for a in p.alerts):
        return ("silenced", STATE_STYLES["silenced"])
    if p.state == "firing":
        return (p.severity, SEVERITY_STYLES.get(p.severity, ""))
    return (p.state, STATE_STYLES.get(p.state, ""))


def active_table(items: Sequence[Problem], width: int, now: float, muted: Collection[str] = ()) -> Text:
    """ACTIVE is how long the condition has held (since the first of its alerts went pending: for a
    wasted GPU, how long it has been wasting), the same clock as the summary's own "for 2h"; not the
    process's age (status TIME) nor how long it held the GPU (history HELD FOR). A firing alert's firing
    time is in ``--json`` (``fired_at``)."""
    cols = [Col("STATE"), *WHAT_AND_WHERE, Col("ACTIVE", right=True)]
    rows: list[list[Cell]] = []
    for p in items:
        lead = p.lead
        rows.append([_state(p, muted), *_what_and_where(p), fmt_duration(now - p.started_at),
                     unplaced(lead.annotations.get("summary", ""), lead.labels)])
    return grid(cols, rows, width, tail="SUMMARY")


def resolved_table(alerts: Sequence[AlertRecord], width: int) -> Text:
    cols = [Col("RESOLVED", drop=1), *WHAT_AND_WHERE, Col("LASTED", right=True)]
    rows: list[list[Cell]] = []
    for p in sorted(problems(alerts), key=lambda p: -max(a.resolved_at or 0 for a in p.alerts)):
        a = p.lead
        ended = max((x.resolved_at or x.updated_at) for x in p.alerts)
        rows.append([fmt_ts(ended)[5:16], *_what_and_where(p), fmt_duration(ended - p.started_at),
                     unplaced(a.annotations.get("resolved") or a.annotations.get("summary", ""), a.labels)])
    return grid(cols, rows, width, tail="SUMMARY")


def silences_table(silences: Sequence[SilenceRecord], width: int, now: float) -> Text:
    cols = [Col("ID", right=True), Col("MATCHERS", shrink=True), Col("ENDS"), Col("BY", shrink=True)]
    rows: list[list[Cell]] = []
    for s in sorted(silences, key=lambda s: s.ends_at):
        ends = (
            f"in {fmt_duration(s.ends_at - now)}" if s.ends_at > now else f"expired {fmt_ts(s.ends_at)[5:16]}"
        )
        rows.append(
            [
                str(s.id),
                " ".join(f"{k}={v}" for k, v in sorted(s.matchers.items())),
                ends,
                s.created_by or "-",
                s.comment,
            ]
        )
    return grid(cols, rows, width, tail="COMMENT", tail_min=20)


def undelivered_lines(alerts: Sequence[AlertRecord], undelivered: dict[str, dict[str, float]]) -> list[Text]:
    """``host_down on n3: undelivered to ops-hook since 2026-12-03 07:40:12``, one line per problem."""
    out: list[Text] = []
    for p in problems(alerts):
        where: dict[str, float] = {}
        for a in p.alerts:
            for name, t in (undelivered.get(a.fingerprint) or {}).items():
                where[name] = min(t, where.get(name, t))
        if where:
            lead = p.lead
            host = p.hosts or lead.labels.get("notifier") or ""
            what = f"{lead.rule} on {host}" if host else lead.rule
            since = ", ".join(f"{name} since {fmt_ts(t)}" for name, t in sorted(where.items()))
            out.append(Text(f"  {what}: undelivered to {since}", "yellow"))
    return out


def headline(items: Sequence[Problem], alerts: int, width: int = 1 << 30) -> list[Text]:
    """``Active alerts: 11 firing (3 critical, 8 warning), 0 pending``: problems, a job's alerts once; the
    informational ones are not counted here (they are listed apart). How many alerts that is follows on the
    same line where it fits, else on its own."""
    firing = [p for p in items if p.state == "firing" and not p.info]
    pending = sum(1 for p in items if p.state == "pending" and not p.info)
    head = Text("Active alerts: ", "bold")
    head.append(f"{len(firing)} firing", "bold red" if firing else "green")
    by = [(s, sum(1 for p in firing if p.severity == s)) for s in reversed(SEVERITIES)]
    shown = [f"{n} {s}" for s, n in by if n]
    if shown:
        head.append(f" ({', '.join(shown)})")
    head.append(f", {pending} pending")
    if alerts <= len(items):
        return [head]
    note = f"{alerts} alerts: a job's are one line"
    if head.cell_len + 3 + len(note) <= width:
        return [head.append(f" · {note}", "dim")]
    return [head, Text(f"  ({note})", "dim")]


def render_alerts(result: dict[str, Any], width: int, now: float, since: float) -> RenderableType:
    active = convert.many(AlertRecord, result.get("active"))
    recent = convert.many(AlertRecord, result.get("recent"))
    silences = convert.many(SilenceRecord, result.get("silences"))
    muted = set(result.get("muted") or ())
    items = problems(active)
    serious = [p for p in items if not p.info]
    info = [p for p in items if p.info]
    parts: list[RenderableType] = [*headline(items, len(active), width)]
    parts.append(active_table(serious, width, now, muted) if serious else Text("  none", "dim"))
    parts += undelivered_lines(active, result.get("undelivered") or {})
    if info:
        parts += [Text(), Text(f"Info, not counted as firing: {len(info)}", "bold"),
                  active_table(info, width, now, muted)]
    parts += [Text(), Text(f"Resolved since {fmt_ts(since)[:16]}: {len(recent)}", style="bold")]
    parts += [Text(f"  {note}", "yellow") for note in (result.get("unreadable") or {}).values()]
    if recent:
        parts.append(resolved_table(recent, width))
    if silences:
        parts += [
            Text(),
            Text(f"Silences: {len(silences)}", style="bold"),
            silences_table(silences, width, now),
        ]
    return Group(*parts)


def render_silences(rows: Sequence[dict[str, Any]], width: int, now: float) -> RenderableType:
    silences = convert.many(SilenceRecord, rows)
    if not silences:
        return Text("no active silences", "dim")
    return silences_table(silences, width, now)
