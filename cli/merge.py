"""One answer from several collectors' answers: shards (disjoint hosts) and replicas (the same hosts).

Replicas of a shard report the same host; the freshest report wins (up before connecting/down, then a
report with a sample before one without, a replica that has just reconnected and not sampled yet must not
hide the GPUs another replica sees, then the newest ``last_seen``). Alerts are the same alert on two
replicas when their fingerprints (rule + labels) are equal; the one updated last is kept. Totals are
counted again from the merged hosts, by the same function the collector counts them with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from gpufleet.cli.client import EXIT_USAGE, CliError
from gpufleet.collector.fleet.report import (
    FORMATS,
    ReportFormat,
    merge_reports,
    render_report,
    report_from_dict,
)
from gpufleet.collector.model.codec import ROWS_FORM, fleet_view_from_dict, fleet_view_rows, plain
from gpufleet.collector.model.names import natural_key
from gpufleet.collector.model.summary import fleet_totals
from gpufleet.collector.model.views import FleetView, HostView

#: Ops answered per host: the collector that knows the host answers, the others say "unknown host".
HOST_OPS = frozenset({"history"})


def host_scoped(op: str, args: dict[str, Any]) -> bool:
    """The shards that do not watch the asked-for host refuse it ("unknown host"): expected, not news."""
    return op in HOST_OPS or bool(args.get("host"))


def _rank(status: str | None, last_seen: float | None, sampled: bool = True) -> tuple[int, int, float]:
    return (1 if status == "up" else 0, 1 if sampled else 0, last_seen or 0.0)


def _freshest(items: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], str],
              rank: Callable[[dict[str, Any]], tuple[Any, ...]]) -> list[dict[str, Any]]:
    best: dict[str, dict[str, Any]] = {}
    for item in items:
        k = key(item)
        if k not in best or rank(item) > rank(best[k]):
            best[k] = item
    return list(best.values())


def merge_status_views(views: Sequence[FleetView]) -> FleetView:
    """One status model from each collector's model: what the screen renders, with no JSON in between."""
    hosts: dict[str, HostView] = {}
    for view in views:
        for h in view.hosts:
            old = hosts.get(h.name)
            if old is None or (_rank(h.status, h.last_seen, h.sample_ts is not None)
                               > _rank(old.status, old.last_seen, old.sample_ts is not None)):
                hosts[h.name] = h
    merged = sorted(hosts.values(), key=lambda h: natural_key(h.name))
    samples = [v.last_sample for v in views if v.last_sample is not None]
    return FleetView(generated_at=max(v.generated_at for v in views), source=views[0].source, hosts=merged,
                     totals=fleet_totals(merged), filters=views[0].filters,
                     last_sample=max(samples) if samples else None)


def merge_status(answers: Sequence[dict[str, Any]], form: str | None = None) -> dict[str, Any]:
    """One status answer in its JSON shape (``--json``, scripts); the screen takes
    :func:`merge_status_views` instead and skips this re-encoding."""
    out = merge_status_views([fleet_view_from_dict(a) for a in answers])
    result: dict[str, Any] = plain(fleet_view_rows(out) if form == ROWS_FORM else out)
    return result


def merge_hosts(answers: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = _freshest([h for a in answers for h in a], lambda h: str(h.get("name")),
                     lambda h: _rank(h.get("status"), h.get("last_seen")))
    return sorted(rows, key=lambda h: natural_key(str(h.get("name"))))


def _merge_alert_list(lists: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    alerts = _freshest([a for lst in lists for a in lst], lambda a: str(a.get("fingerprint")),
                       lambda a: (a.get("updated_at") or 0.0,))
    return sorted(alerts, key=lambda a: (a.get("started_at") or 0.0, str(a.get("fingerprint"))))


def merge_alerts(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = dict(answers[0])
    for key, value in answers[0].items():
        if isinstance(value, list):
            out[key] = _merge_alert_list([a.get(key) or [] for a in answers])
        elif isinstance(value, dict) and key in ("undelivered", "unreadable"):
            merged: dict[str, Any] = {}
            for a in answers:
                merged.update(a.get(key) or {})
            out[key] = merged
    return out


def collector_args(op: str, args: dict[str, Any]) -> dict[str, Any]:
    """What each collector is asked for ``op``: the report as JSON, which the CLI merges and renders."""
    if op == "report":
        if args.get("send"):
            raise CliError("report --send with several collectors would send one partial report per shard; "
                           "send from one collector (-c / --socket), or pipe the merged `gpufleet report` "
                           "to your mailer", EXIT_USAGE)
        return {**args, "format": "json"}
    return args


def replica_groups(covers: Sequence[tuple[str | None, set[str]]]) -> list[list[int]]:
    """Which answers are replicas of one another: the same shard ``I/N``, or (from collectors that say no
    shard) answers that cover a host in common. Indexes into ``covers`` (shard, hosts), grouped."""
    parent = list(range(len(covers)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i] = parent[parent[i]]
        return i

    for i, (shard_i, hosts_i) in enumerate(covers):
        for j in range(i):
            shard_j, hosts_j = covers[j]
            if (shard_i is not None and shard_i == shard_j) or (
                    shard_i is None and shard_j is None and hosts_i & hosts_j):
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(covers)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def merge_report(answers: Sequence[dict[str, Any]], fmt: str | None) -> dict[str, Any]:
    """The shards' reports as one: one answer per shard (of replicas, the one that observed the most
    GPU-hours, i.e. watched longest), then GPU-hours summed per user and host, rendered as asked."""
    reports = []
    for a in answers:
        try:
            reports.append(report_from_dict(json.loads(str(a.get("text")))))
        except ValueError:
            raise CliError("a collector sent a report that is not JSON (too old to merge?)") from None
    covers = [(a.get("shard"), {r.host for r in rep.rows if r.host} | set(rep.faults))
              for a, rep in zip(answers, reports, strict=True)]
    chosen = [max((reports[i] for i in g), key=lambda r: (r.observed, r.total.held))
              for g in replica_groups(covers)]
    merged = merge_reports(chosen)
    shape = fmt if fmt in FORMATS else "text"
    return {"since": merged.since, "until": merged.until, "host": merged.host, "format": shape,
            "text": render_report(merged, cast("ReportFormat", shape)), "shards": len(chosen)}


def merge_history(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A host's history from the collectors that know it (its shard's replicas): the fullest one (most
    points, then processes), since each replica's record starts when that replica started watching."""
    def size(a: dict[str, Any]) -> tuple[int, int]:
        return (sum(len(s.get("points") or []) for s in a.get("series") or []), len(a.get("processes") or []))

    return max(answers, key=size)


#: Ops whose answer is maintenance windows (collector/maintenance.py), one per host in force
MAINTENANCE_OPS = frozenset({"maintenance_start", "maintenance_stop", "maintenance_list"})


def merge_windows(answers: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Replicas of a shard each keep their own copy of a host's window: one per host, the latest started
    (shards hold disjoint hosts, so they only add)."""
    rows = _freshest([w for a in answers for w in a], lambda w: str(w.get("host")),
                     lambda w: (w.get("starts_at") or 0.0,))
    return sorted(rows, key=lambda w: natural_key(str(w.get("host"))))


def merge(op: str, answers: Sequence[Any], args: dict[str, Any] | None = None) -> Any:
    """The merged answer of ``op``; ops without a merge take the first answer (one shard's view)."""
    args = args or {}
    if op == "report":  # always: even one answer came as JSON and is rendered here
        return merge_report(answers, args.get("format"))
    if len(answers) == 1:
        return answers[0]
    if op == "status":
        return merge_status(answers, args.get("form"))
    if op == "hosts":
        return merge_hosts(answers)
    if op == "alerts":
        return merge_alerts(answers)
    if op == "history":
        return merge_history(answers)
    if op in MAINTENANCE_OPS and not args.get("include_ended"):
        return merge_windows(answers)
    if all(isinstance(a, list) for a in answers):  # events, processes, usage rows, silences ...
        seen: set[str] = set()
        rows: list[Any] = []
        for a in answers:
            for row in a:
                k = repr(sorted(row.items())) if isinstance(row, dict) else repr(row)
                if k not in seen:
                    seen.add(k)
                    rows.append(row)
        return rows
    return answers[0]
