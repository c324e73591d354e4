"""``gpufleet alerts`` (firing/pending, recently resolved, silences) and ``gpufleet silence list``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gpufleet.cli import convert
from gpufleet.cli.timeparse import fmt_duration, fmt_ts
from gpufleet.collector.query import flag_name, natural_key
from gpufleet.collector.store.records import AlertRecord, SilenceRecord
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
STATE_STYLES = {"firing": "bold red", "pending": "yellow", "resolved": "green"}


def _table(width: int) -> Table:
    return Table(box=None, pad_edge=False, header_style="bold dim", width=min(width, 160))


def _labels(a: AlertRecord) -> tuple[str, str, str]:
    return a.labels.get("host", "-"), a.labels.get("gpu", "-"), a.labels.get("user", "")


def _sort_key(a: AlertRecord) -> tuple[int, list[Any], str]:
    sev = {"critical": 0, "warning": 1, "info": 2}.get(a.severity, 3)
    return sev, natural_key(a.labels.get("host", "")), a.rule


def active_table(alerts: Sequence[AlertRecord], width: int, now: float, muted: Collection[str] = ()) -> Table:
    t = _table(width)
    for name, justify in (
        ("SEVERITY", "left"),
        ("STATE", "left"),
        ("RULE", "left"),
        ("HOST", "left"),
        ("GPU", "right"),
        ("USER", "left"),
        ("FOR", "right"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    t.add_column("SUMMARY", overflow="fold")
    for a in sorted(alerts, key=_sort_key):
        host, gpu, user = _labels(a)
        t.add_row(
            Text(a.severity, SEVERITY_STYLES.get(a.severity, "")),
            Text(
                a.state + (" (silenced)" if a.fingerprint in muted else ""),
                "dim" if a.fingerprint in muted else STATE_STYLES.get(a.state, ""),
            ),
            flag_name(a.rule) if flag_name(a.rule) == a.rule else f"{a.rule} ({flag_name(a.rule)})",
            host,
            gpu,
            user,
            fmt_duration(now - (a.fired_at or a.started_at)),
            a.annotations.get("summary", ""),
        )
    return t


def resolved_table(alerts: Sequence[AlertRecord], width: int) -> Table:
    t = _table(width)
    for name, justify in (
        ("RESOLVED", "left"),
        ("RULE", "left"),
        ("HOST", "left"),
        ("GPU", "right"),
        ("USER", "left"),
        ("LASTED", "right"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    t.add_column("SUMMARY", overflow="fold")
    for a in sorted(alerts, key=lambda a: -(a.resolved_at or 0)):
        host, gpu, user = _labels(a)
        lasted = (a.resolved_at or a.updated_at) - (a.fired_at or a.started_at)
        t.add_row(
            fmt_ts(a.resolved_at)[5:],
            a.rule,
            host,
            gpu,
            user,
            fmt_duration(lasted),
            a.annotations.get("resolved") or a.annotations.get("summary", ""),
        )
    return t


def silences_table(silences: Sequence[SilenceRecord], width: int, now: float) -> Table:
    t = _table(width)
    t.add_column("ID", justify="right", no_wrap=True)
    t.add_column("MATCHERS", no_wrap=True)
    t.add_column("ENDS", no_wrap=True)
    t.add_column("BY", no_wrap=True)
    t.add_column("COMMENT", overflow="fold")
    for s in sorted(silences, key=lambda s: s.ends_at):
        ends = (
            f"in {fmt_duration(s.ends_at - now)}" if s.ends_at > now else f"expired {fmt_ts(s.ends_at)[5:16]}"
        )
        t.add_row(
            str(s.id),
            " ".join(f"{k}={v}" for k, v in sorted(s.matchers.items())),
            ends,
            s.created_by or "-",
            s.comment,
        )
    return t


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
    parts += [Text(), Text(f"Resolved since {fmt_ts(since)[:16]}: {len(recent)}", style="bold")]
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
