"""One answer from several collectors' answers: shards (disjoint hosts) and replicas (the same hosts).

Replicas of a shard report the same host; the freshest report wins (up before connecting/down, then a
report with a sample before one without, a replica that has just reconnected and not sampled yet must not
hide the GPUs another replica sees, then the newest ``last_seen``). Alerts are the same alert on two
replicas when their fingerprints (rule + labels) are equal; the one updated last is kept. Totals are
counted again from the merged hosts, by the same function the collector counts them with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.collector.query import (
    ROWS_FORM,
    FleetView,
    HostView,
    fleet_totals,
    fleet_view_from_dict,
    fleet_view_rows,
    natural_key,
)

#: Ops answered per host: the collector that knows the host answers, the others say "unknown host".
HOST_OPS = frozenset({"history"})


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


def merge_status(answers: Sequence[dict[str, Any]], form: str | None = None) -> dict[str, Any]:
    """One status view; in the compact rows form when the screen asked for it (half the work to rebuild)."""
    views = [fleet_view_from_dict(a) for a in answers]
    hosts: dict[str, HostView] = {}
    for view in views:
        for h in view.hosts:
            old = hosts.get(h.name)
            if old is None or (_rank(h.status, h.last_seen, h.sample_ts is not None)
                               > _rank(old.status, old.last_seen, old.sample_ts is not None)):
                hosts[h.name] = h
    merged = sorted(hosts.values(), key=lambda h: natural_key(h.name))
    samples = [v.last_sample for v in views if v.last_sample is not None]
    out = FleetView(generated_at=max(v.generated_at for v in views), source=views[0].source, hosts=merged,
                    totals=fleet_totals(merged), filters=views[0].filters,
                    last_sample=max(samples) if samples else None)
    from gpufleet.collector.api import plain

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
        elif isinstance(value, dict) and key == "undelivered":
            merged: dict[str, Any] = {}
            for a in answers:
                merged.update(a.get(key) or {})
            out[key] = merged
    return out


def merge(op: str, answers: Sequence[Any], args: dict[str, Any] | None = None) -> Any:
    """The merged answer of ``op``; ops without a merge take the first answer (one shard's view)."""
    if len(answers) == 1:
        return answers[0]
    if op == "status":
        return merge_status(answers, (args or {}).get("form"))
    if op == "hosts":
        return merge_hosts(answers)
    if op == "alerts":
        return merge_alerts(answers)
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

