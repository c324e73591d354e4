"""``gpufleet alerts`` (firing/pending, recently resolved, silences) and ``gpufleet silence list``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gpufleet.cli import convert
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.timeparse import fmt_ts
from gpufleet.collector.model.names import natural_key
from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.rules.catalog import SEVERITY_STYLES, flag_name, severity_rank
from gpufleet.collector.units import fmt_duration
from rich.console import Group, RenderableType
from rich.text import Text

STATE_STYLES = {"firing": "bold red", "pending": "yellow", "resolved": "green"}


#: the columns both alert tables have: which rule, on which host, GPU and user
WHAT_AND_WHERE = (Col("RULE"), Col("HOST", shrink=True), Col("GPU", right=True), Col("USER", shrink=True))


def _what_and_where(a: AlertRecord) -> list[Cell]:
    gpu = a.labels.get("gpu") or a.labels.get("gpus") or "-"  # gpus: a Slurm job's unused GPUs (0-1)
    return [rule_label(a.rule), a.labels.get("host", "-"), gpu, a.labels.get("user", "")]


def _sort_key(a: AlertRecord) -> tuple[int, list[Any], str]:
    return -severity_rank(a.severity), natural_key(a.labels.get("host", "")), a.rule


def rule_label(rule: str) -> str:
    """``overheating (hot)``: the rule name and, where it differs, the flag the status screen shows."""
    flag = flag_name(rule)
    return rule if flag == rule else f"{rule} ({flag})"


def active_table(alerts: Sequence[AlertRecord], width: int, now: float, muted: Collection[str] = ()) -> Text:
    """ACTIVE FOR is how long the condition has held (since the alert went pending: for a wasted GPU, how
    long it has been wasting), the same clock as the summary's own "for 2h"; not the process's age (status
    RUNNING) nor how long it held the GPU (history HELD FOR). A firing alert's firing time is in ``--json``
    (``fired_at``)."""
    cols = [Col("SEVERITY"), Col("STATE"), *WHAT_AND_WHERE, Col("ACTIVE FOR", right=True)]
    rows: list[list[Cell]] = []
    for a in sorted(alerts, key=_sort_key):
        muted_now = a.fingerprint in muted
        state = (a.state + " (silenced)", "dim") if muted_now else (a.state, STATE_STYLES.get(a.state, ""))
        rows.append([(a.severity, SEVERITY_STYLES.get(a.severity, "")), state, *_what_and_where(a),
                     fmt_duration(now - a.started_at), a.annotations.get("summary", "")])
    return grid(cols, rows, width, tail="SUMMARY")


def resolved_table(alerts: Sequence[AlertRecord], width: int) -> Text:
    cols = [Col("RESOLVED"), *WHAT_AND_WHERE, Col("LASTED", right=True)]
    rows: list[list[Cell]] = []
    for a in sorted(alerts, key=lambda a: -(a.resolved_at or 0)):
        lasted = (a.resolved_at or a.updated_at) - a.started_at
        rows.append([fmt_ts(a.resolved_at)[5:16], *_what_and_where(a), fmt_duration(lasted),
                     a.annotations.get("resolved") or a.annotations.get("summary", "")])
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
    """``host_down on n3: undelivered to ops-hook since 2026-12-03 07:40:12``, one line per alert."""
    out: list[Text] = []
    for a in sorted(alerts, key=_sort_key):
        where = undelivered.get(a.fingerprint) or {}
        if where:
            host = a.labels.get("host") or a.labels.get("notifier") or ""
            what = f"{a.rule} on {host}" if host else a.rule
            since = ", ".join(f"{name} since {fmt_ts(t)}" for name, t in sorted(where.items()))
            out.append(Text(f"  {what}: undelivered to {since}", "yellow"))
    return out


def render_alerts(result: dict[str, Any], width: int, now: float, since: float) -> RenderableType:
    active = convert.many(AlertRecord, result.get("active"))
    recent = convert.many(AlertRecord, result.get("recent"))
    silences = convert.many(SilenceRecord, result.get("silences"))
    firing = sum(1 for a in active if a.state == "firing")
    parts: list[RenderableType] = []
    head = Text("Active alerts: ", "bold")
    head.append(f"{firing} firing", "bold red" if firing else "green")
    head.append(f", {len(active) - firing} pending")
    parts.append(head)
    muted = set(result.get("muted") or ())
    parts.append(active_table(active, width, now, muted) if active else Text("  none", "dim"))
    parts += undelivered_lines(active, result.get("undelivered") or {})
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
