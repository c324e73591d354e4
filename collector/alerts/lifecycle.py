"""The alert lifecycle, like Prometheus': a rule's condition makes an alert ``pending``; after ``for`` it is
``firing``; when the condition clears it is ``resolved`` with a message saying why. Once firing, a condition
that clears keeps the alert firing for ``keep_firing_for`` (Prometheus 2.42), so a flapping host is one alert,
not a new one per flap.

This module owns the alert records in memory (one per fingerprint) and which of them changed since the last
save; grouping, muting and notes read them, and mark what they change with :meth:`Lifecycle.mark`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.collector.alerts.fingerprint import fingerprint
from gpufleet.collector.alerts.notes import ENGINE_ANNOTATIONS, keep_annotations
from gpufleet.collector.model.classify import processes_unknown
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.base import Condition, HostContext, Rule, find_gpu, selector_matches
from gpufleet.collector.rules.hosts import COLLECTOR
from gpufleet.collector.rules.wording import DURATION
from gpufleet.collector.units import fmt_duration

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Clearing:
    """A firing alert whose condition cleared, kept firing until ``since + keep_firing_for``."""

    since: float
    message: str  # the resolved message as of the moment it cleared


def _processes_unknown(ctx: HostContext, labels: dict[str, str]) -> bool:
    g = find_gpu(ctx, labels)
    return g is not None and processes_unknown(g)


def needs_resolved_notice(a: AlertRecord) -> bool:
    """Its firing was sent and its resolution not yet."""
    return a.last_notified_at is not None and a.resolved_at is not None and a.last_notified_at < a.resolved_at


class Lifecycle:
    """Conditions -> alert transitions, in memory. Never does I/O."""

    def __init__(self, rules: dict[str, Rule], counters: dict[str, int]) -> None:
        self.rules = rules
        self.counters = counters
        self.alerts: dict[str, AlertRecord] = {}
        self.dirty: dict[str, AlertRecord] = {}  # changed since the last save
        self._templates: dict[str, Condition] = {}  # fingerprint -> latest condition (to re-render durations)
        self._scopes: dict[tuple[str, str], set[str]] = {}  # (rule, host) -> fingerprints
        self._clearing: dict[str, _Clearing] = {}  # fingerprint -> kept firing since (keep_firing_for)

    def mark(self, a: AlertRecord) -> None:
        self.dirty[a.fingerprint] = a

    # ------------------------------------------------------------------------------ conditions -> alerts

    def reconcile(self, rule: Rule, ctx: HostContext, conditions: list[Condition] | None, now: float) -> None:
        """Make the alerts of (rule, host) match the rule's complete current set of conditions."""
        if conditions is None or not conditions and (rule.name, ctx.name) not in self._scopes:
            return  # no information, or nothing true and nothing of it alerted here (most calls)
        seen: set[str] = set()
        for c in conditions:
            if not selector_matches(rule.config.select, c.labels, ctx.tags):
                continue
            labels = {**c.labels, "rule": rule.name}
            fp = fingerprint(labels)
            seen.add(fp)
            self._clearing.pop(fp, None)  # back within keep_firing_for: the same alert goes on
            a = self.alerts.get(fp)
            if a is None or a.state == "resolved":
                a = AlertRecord(fingerprint=fp, rule=rule.name, severity=c.severity or rule.severity,
                                state="pending", labels=labels, started_at=now, updated_at=now)
                self.track(a)
                self.mark(a)
            self._templates[fp] = c
            a.value = c.value
            a.severity = c.severity or rule.severity
            a.annotations = self.render(a, c, now)
            if a.state == "pending" and now - a.started_at >= rule.for_seconds:
                self.fire(a, now)
        for fp in list(self._scopes.get((rule.name, ctx.name), ())):
            a = self.alerts.get(fp)
            if fp not in seen and a is not None and a.state != "resolved":
                if rule.reads_processes and _processes_unknown(ctx, a.labels):
                    continue  # the agent could not read the list: no evidence either way
                self._cleared(a, rule, ctx, now)

    def _cleared(self, a: AlertRecord, rule: Rule, ctx: HostContext, now: float) -> None:
        keep = rule.config.keep_firing_for
        if a.state != "firing" or keep <= 0 or not rule.keeps_firing(a, ctx):
            self.resolve(a, rule.resolved_message(a, ctx, now) if a.state == "firing" else None, now)
            return
        clearing = self._clearing.get(a.fingerprint)
        if clearing is None:
            clearing = self._clearing[a.fingerprint] = _Clearing(now, rule.resolved_message(a, ctx, now))
        if now - clearing.since >= keep:
            self.resolve(a, clearing.message, now)

    def promote(self, now: float) -> None:
        """Time-driven transitions: pending -> firing after ``for``; kept alerts resolve after
        ``keep_firing_for``."""
        for a in list(self.alerts.values()):
            rule = self.rules.get(a.rule)
            if a.state == "pending" and rule is not None and now - a.started_at >= rule.for_seconds:
                self.fire(a, now)
        for fp, clearing in list(self._clearing.items()):
            kept = self.alerts.get(fp)
            own = self.rules.get(kept.rule) if kept is not None else None
            if kept is None or own is None or kept.state != "firing":
                del self._clearing[fp]
            elif now - clearing.since >= own.config.keep_firing_for:
                self.resolve(kept, clearing.message, now)

    def fire(self, a: AlertRecord, now: float) -> None:
        a.state, a.fired_at, a.updated_at = "firing", now, now
        self.mark(a)
        self.counters["alerts_fired"] += 1
        log.info("firing %s %s: %s", a.rule, a.fingerprint, a.annotations.get("summary", ""))

    def resolve(self, a: AlertRecord, message: str | None, now: float) -> None:
        """Resolve; ``message`` (why it cleared) is kept only for an alert that was firing."""
        was_firing = a.state == "firing"
        self._clearing.pop(a.fingerprint, None)
        a.state, a.resolved_at, a.updated_at = "resolved", now, now
        if a.last_notified_at is not None and a.last_notified_at >= now:
            a.resolved_at = a.last_notified_at + 0.001  # keep "resolved after last notified" strict
        if was_firing:
            a.annotations["resolved"] = message or f"{a.rule} resolved"
            self.counters["alerts_resolved"] += 1
            log.info("resolved %s %s: %s", a.rule, a.fingerprint, a.annotations["resolved"])
        self.mark(a)

    # ------------------------------------------------------------------------------------ records

    def render(self, a: AlertRecord, c: Condition, now: float) -> dict[str, str]:
        took = fmt_duration(now - a.started_at)
        annotations = {**c.annotations, "summary": c.summary.replace(DURATION, took)}
        if c.description:
            annotations["description"] = c.description.replace(DURATION, took)
        annotations.update(keep_annotations(a))
        for key in ENGINE_ANNOTATIONS:
            if key in a.annotations:
                annotations[key] = a.annotations[key]
        return annotations

    def copy(self, a: AlertRecord, now: float) -> AlertRecord:
        """What a notifier gets: current durations rendered, engine bookkeeping left out."""
        c = self._templates.get(a.fingerprint)
        if c is not None and a.state == "firing":
            a.annotations = self.render(a, c, now)
        shown = {k: v for k, v in a.annotations.items() if k not in ENGINE_ANNOTATIONS}
        return dataclasses.replace(a, labels=dict(a.labels), annotations=shown)

    def track(self, a: AlertRecord) -> None:
        self.alerts[a.fingerprint] = a
        self._scopes.setdefault((a.rule, a.labels.get("host", COLLECTOR)), set()).add(a.fingerprint)

    def untrack(self, a: AlertRecord) -> None:
        if self.alerts.get(a.fingerprint) is a:
            del self.alerts[a.fingerprint]
            self._templates.pop(a.fingerprint, None)
            self._clearing.pop(a.fingerprint, None)
            scope = self._scopes.get((a.rule, a.labels.get("host", COLLECTOR)))
            if scope is not None:
                scope.discard(a.fingerprint)

    def cleanup(self) -> None:
        """Forget resolved alerts once their resolution was sent (or never needed sending)."""
        for a in list(self.alerts.values()):
            if a.state == "resolved" and not needs_resolved_notice(a):
                self.untrack(a)

    def firing(self, pred: Callable[[AlertRecord], bool] = lambda a: True) -> list[AlertRecord]:
        return [a for a in self.alerts.values() if a.state == "firing" and pred(a)]

    # ------------------------------------------------------------------------------------ queries

    def active(self) -> list[AlertRecord]:
        """Pending and firing alerts (copies), oldest first."""
        alerts = [a for a in self.alerts.values() if a.state != "resolved"]
        return [dataclasses.replace(a, labels=dict(a.labels), annotations=dict(a.annotations))
                for a in sorted(alerts, key=lambda a: a.started_at)]
