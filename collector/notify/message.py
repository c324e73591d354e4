"""How a notification reads: chat title/body, the webhook JSON, the Alertmanager API v2 alert list.

The webhook payload follows Alertmanager's webhook format (version 4) so receivers written for Alertmanager
(and people who know it) can read it; ``title`` and ``message`` are added for simple consumers.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from gpufleet.collector.model.jobkey import job_label
from gpufleet.collector.model.problems import JOB, Problem
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.rules.catalog import flag_name, flag_rank, severity_rank

WEBHOOK_VERSION = "4"
#: annotation carrying the command that keeps (silences) the alert's process, printed under the list
KEEP = "keep"


def iso(ts: float | None) -> str:
    """RFC 3339 UTC with milliseconds; Alertmanager's "zero time" for None."""
    if ts is None:
        return "0001-01-01T00:00:00Z"
    stamp = dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def alert_status(a: AlertRecord) -> str:
    return "firing" if a.state == "firing" else "resolved"


def firing(n: Notification) -> list[AlertRecord]:
    return [a for a in n.alerts if a.state == "firing"]


def resolved(n: Notification) -> list[AlertRecord]:
    return [a for a in n.alerts if a.state != "firing"]


def common_labels(alerts: list[AlertRecord]) -> dict[str, str]:
    if not alerts:
        return {}
    common = dict(alerts[0].labels)
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a.labels.get(k) == v}
    return common


def where(alerts: list[AlertRecord]) -> str:
    """``n3 GPU 2``, ``gpu-node-15 GPU 1,2,3``, ``n1 GPU 0; n2 GPU 1`` or a host alone: what the alerts are
    on, every GPU named (one notification for a job names all its GPUs)."""
    return "; ".join(f"{h} GPU {','.join(g)}" if g else h for h, g in Problem("", alerts).where() if h)


def _subject(n: Notification) -> str:
    labels = n.group_labels or common_labels(n.alerts)
    on = where(n.alerts) if n.alerts else ""
    job = labels.get(JOB)
    if job:  # one problem: a job's idle GPUs (collector/model/problems.py)
        ordered = sorted(n.alerts, key=lambda a: (not a.labels.get(JOB), flag_rank(flag_name(a.rule))))
        rules = ", ".join(dict.fromkeys(a.rule for a in ordered))  # the job's own rule first
        owner = f"{labels['user']}'s " if labels.get("user") else ""
        return f"{rules}: {owner}{job_label(job)}" + (f" on {on}" if on else "")
    rule, host = labels.get("rule"), labels.get("host")
    rest = [f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("rule", "host") and v]
    text = rule or "alerts"
    if host:
        text += f" on {on or host}"
    if rest:
        text += f" ({', '.join(rest)})"
    return text


def title(n: Notification) -> str:
    if n.title:
        return n.title
    f, r = firing(n), resolved(n)
    if f:
        worst = max((a.severity for a in f), key=severity_rank)
        more = f", {len(r)} resolved" if r else ""
        return f"[FIRING:{len(f)}{more}] {worst}: {_subject(n)}"
    return f"[RESOLVED] {_subject(n)}"


def body(n: Notification, fmt: str = "text") -> str:
    """One line per alert; resolved alerts show their resolved message."""
    if n.body:
        return n.body
    bullet = "- " if fmt == "markdown" else "* "
    lines: list[str] = []
    keeps: list[str] = []
    for a in firing(n):
        lines.append(f"{bullet}{a.annotations.get('summary', a.rule)}")
        cmd = a.annotations.get(KEEP)  # the alert says how its user keeps it (alerts/notes.py)
        if cmd and cmd not in keeps:
            keeps.append(cmd)
    for a in resolved(n):
        text = a.annotations.get("resolved") or f"resolved: {a.annotations.get('summary', a.rule)}"
        lines.append(f"{bullet}RESOLVED {text}")
    if keeps:
        lead = ("If you still need it, keep it for 2h with" if n.kind == "user"
                else "To keep one for 2h, its user runs")
        shown = [f"`{c}`" if fmt == "markdown" else c for c in keeps]
        lines += ["", f"{lead}:", *(f"  {c}" for c in shown)]
    return "\n".join(lines)


def alert_json(a: AlertRecord, *, ends_at: float | None = None) -> dict[str, Any]:
    return {
        "status": alert_status(a),
        "labels": {"alertname": a.rule, "severity": a.severity, **a.labels},
        "annotations": dict(a.annotations),
        "startsAt": iso(a.fired_at or a.started_at),
        "endsAt": iso(a.resolved_at if a.state != "firing" else ends_at),
        "fingerprint": a.fingerprint,
    }


def webhook_payload(n: Notification, receiver: str) -> dict[str, Any]:
    if n.kind == "report":
        return {"version": WEBHOOK_VERSION, "kind": "report", "receiver": receiver,
                "groupKey": n.group_key, "title": title(n), "message": body(n), "report": n.data or {},
                "alerts": []}
    alerts = [alert_json(a) for a in n.alerts]
    common = common_labels(n.alerts)
    common_ann = {}
    if n.alerts:
        common_ann = {k: v for k, v in n.alerts[0].annotations.items()
                      if all(a.annotations.get(k) == v for a in n.alerts[1:])}
    return {
        "version": WEBHOOK_VERSION,
        "kind": n.kind,
        "receiver": receiver,
        "status": n.status,
        "groupKey": n.group_key,
        "groupLabels": dict(n.group_labels),
        "commonLabels": {"alertname": common["rule"], **common} if "rule" in common else common,
        "commonAnnotations": common_ann,
        "externalURL": "",
        "truncatedAlerts": 0,
        "title": title(n),
        "message": body(n),
        "recipient": n.recipient,
        "alerts": alerts,
    }


def alertmanager_alerts(n: Notification, now: float, *, horizon: float,
                        generator_url: str | None = None) -> list[dict[str, Any]]:
    """Alertmanager API v2 ``postableAlerts``: firing alerts end ``horizon`` seconds from now unless re-posted
    (like Prometheus does), so a dead collector's alerts resolve in Alertmanager by themselves."""
    out: list[dict[str, Any]] = []
    for a in n.alerts:
        labels = {k: v for k, v in {"alertname": a.rule, "severity": a.severity, **a.labels}.items() if v}
        item: dict[str, Any] = {
            "labels": labels,
            "annotations": {k: v for k, v in a.annotations.items() if v},
            "startsAt": iso(a.fired_at or a.started_at),
            "endsAt": iso(a.resolved_at if a.state != "firing" and a.resolved_at else now + horizon),
        }
        if generator_url:
            item["generatorURL"] = generator_url
        out.append(item)
    return out
