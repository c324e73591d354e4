"""Collector-side rules: host down (SSH lost, host key refused, agent silent), storage failing, a
notification destination failing (notifier_down), a host whose clock disagrees with the collector's
(clock_skew: the stream re-stamps its frames meanwhile), and a host sending more than its budget
(over_budget: the excess is dropped, see collector/transport/budget.py).

host_down is true while the transport says the host is ``down``, stays true through ``connecting`` retries
(so a reconnect loop does not flap the alert), and is also true when a host that is ``up`` has sent no frame
for ``missed_intervals`` x its sampling interval (plus STARTUP_GRACE before the first frame of a
connection). A host in ``maintenance`` is not observed at all: nothing new fires, and an alert already
there stays as it was (muted by the window's silence) until the host is watched again. A reason starting
with "host key" (the transport's HostKeyError) is put first in the summary: that is the host-key alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule, TickRule
from gpufleet.collector.rules.wording import safe
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_duration

COLLECTOR = ""  # the pseudo-host the storage rule is evaluated for
#: extra time for the first frame after a (re)connect: the agent may be uploaded and NVML initialised first
STARTUP_GRACE = 10.0


@dataclass(slots=True)
class _Down:
    since: float
    reason: str


HOST_KEY = "host_key"
HOST_KEY_SUMMARY = "{host}: {reason} (collector refuses to connect)"


class HostDownRule(TickRule):
    name = "host_down"
    p: catalog.HostDown

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._down: dict[str, _Down] = {}

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        state = ctx.state
        if state is None or state.status == "maintenance":
            return None  # nothing heard from the transport yet, or let go of on purpose: keep what we knew
        down = self._down.get(ctx.name)
        if state.status == "down":
            reason = state.reason or "connection lost"
            if down is None:
                down = self._down[ctx.name] = _Down(state.since, reason)
            down.reason = reason
        elif state.status == "up":
            last = max(ctx.last_frame or 0.0, state.since)
            limit = self.p.missed_intervals * max(ctx.interval, 0.001)
            if ctx.last_frame is None or ctx.last_frame < state.since:
                limit += STARTUP_GRACE  # nothing yet on this connection
            if now - last > limit:
                reason = f"no frame for {fmt_duration(now - last)} (expected every {ctx.interval:g} s)"
                if down is None:
                    down = self._down[ctx.name] = _Down(last, reason)
                down.reason = reason
            else:
                self._down.pop(ctx.name, None)
                down = None
        if down is None:  # connecting and never down, or up and fresh
            return []
        if down.reason.lower().startswith("host key"):
            # Its own alert (label kind=host_key), so a host that was down and comes back reinstalled
            # with a new key is news now, not an edit of an alert already sent hours ago.
            return [Condition(
                self.name, {"host": ctx.name, "kind": HOST_KEY}, HOST_KEY_SUMMARY.format(
                    host=ctx.name, reason=safe(down.reason, 600)),
                "The host's SSH key is unknown or changed. If the change is expected, update known_hosts.",
                annotations={"reason": safe(down.reason, 600), "kind": HOST_KEY},
            )]
        return [Condition(
            self.name, {"host": ctx.name}, f"{ctx.name} is down: {safe(down.reason, 200)}",
            "The collector cannot read this host; its other alerts are held back until it is back.",
            annotations={"reason": safe(down.reason, 300), "kind": "down"},
        )]

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        host = alert.labels.get("host")
        state = ctx.state if ctx is not None else None
        if state is not None and state.status == "down":  # one reason gave way to another
            return f"{host}: no longer '{alert.annotations.get('reason', 'down')}'; now: {state.reason}"
        return f"{host} is back up after {fmt_duration(now - alert.started_at)}"

    def keeps_firing(self, alert: AlertRecord, ctx: HostContext) -> bool:
        # still down, for another reason: the other kind's alert (host key vs down) fires instead
        return ctx.name not in self._down

    def restore(self, alert: AlertRecord) -> None:
        host = alert.labels.get("host", "")
        reason = alert.annotations.get("reason", "connection lost")
        self._down.setdefault(host, _Down(alert.started_at, reason))

    def forget_host(self, host: str) -> None:
        self._down.pop(host, None)


class CollectorFaultRule(Rule):
    """A fault of the collector itself (the pseudo-host ``COLLECTOR``), reported by the part that sees it
    through :meth:`report`: unknown (None) until the first report, then firing while ``faulty``."""

    on_snapshot = False
    #: what the operator should know and do while it fires
    description: ClassVar[str] = ""
    #: the annotation that carries the detail (receivers read it by this name)
    detail_key: ClassVar[str] = "detail"

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self.faulty: bool | None = None
        self.detail: str | None = None

    def report(self, faulty: bool, detail: str | None) -> None:
        self.faulty = faulty
        if detail or not faulty:
            self.detail = detail or self.detail

    def summary(self, detail: str) -> str:
        raise NotImplementedError

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if self.faulty is None:
            return None
        if not self.faulty:
            return []
        detail = safe(self.detail, 300)
        return [Condition(self.name, {}, self.summary(safe(self.detail, 200)), self.description,
                          annotations={self.detail_key: detail})]


class StorageRule(CollectorFaultRule):
    """Fed by Store.on_health_change through AlertEngine.storage_health."""

    name = "storage"
    detail_key = "error"
    description = ("History is not being written (disk full, permissions, corruption). Live views and alerts "
                   "keep working; free space or fix the database file.")

    def summary(self, detail: str) -> str:
        return f"storage is failing: {detail}"

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return f"storage is healthy again after {fmt_duration(now - alert.started_at)}"


class HostFlagRule(TickRule):
    """A condition the agent stream flags on the host's state (one owner of each bound: the stream);
    true only while the host is up. Unknown until the engine has the host's state."""

    def condition(self, ctx: HostContext, state: HostState) -> Condition | None:
        raise NotImplementedError

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        state = ctx.state
        if state is None:
            return None
        found = self.condition(ctx, state) if state.status == "up" else None
        return [found] if found else []


YEAR = 365.25 * 86400


class ClockSkewRule(HostFlagRule):
    """Reads the flag the agent stream sets (collector/transport/stream.py)."""

    name = "clock_skew"

    def condition(self, ctx: HostContext, state: HostState) -> Condition | None:
        skew = state.clock_skew
        if skew is None:
            return None
        side = "behind" if skew > 0 else "ahead of"
        size = fmt_duration(abs(skew)) if abs(skew) < 100 * YEAR else "more than 100 years"
        return Condition(
            self.name, {"host": ctx.name}, f"{ctx.name}: agent clock is {size} {side} the collector's",
            "The collector stamps this host's samples with its own clock meanwhile. Check NTP/chrony on "
            "the host.", value=skew, annotations={"offset_seconds": f"{skew:.6g}"},
        )

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return f"{alert.labels.get('host')}: clocks agree again"


class NotifierDownRule(Rule):
    """Fed by the engine each tick with the failing destinations (NotificationDispatcher.failing): one
    alert per destination that has accepted nothing for ``alerting.notifier_down_after``, labelled
    ``notifier`` so it is delivered through the other destinations only (alerts.grouping)."""

    name = "notifier_down"
    on_snapshot = False

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self.after = 600.0
        self.failing: dict[str, float] | None = None  # destination -> failing since (wall time)
        self.errors: dict[str, str] = {}

    def set_failing(self, failing: dict[str, float], errors: dict[str, str], after: float) -> None:
        self.failing, self.errors, self.after = dict(failing), dict(errors), after

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if self.failing is None:
            return None
        out: list[Condition] = []
        for name, since in sorted(self.failing.items()):
            if now - since < self.after:
                continue
            error = safe(self.errors.get(name, "delivery failed"), 300)
            out.append(Condition(
                self.name, {"notifier": name},
                f"notifications to {name} have failed for {fmt_duration(now - since)}: {safe(error, 200)}",
                "Alerts are not reaching this destination; it is retried with backoff until it accepts them.",
                annotations={"error": error, "failing_since": f"{since:.3f}"}))
        return out

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        name = alert.labels.get("notifier", "?")
        since = alert.annotations.get("failing_since")
        took = f" after {fmt_duration(now - float(since))}" if since else ""
        return f"notifier {name} accepts notifications again{took}"


class CollectorOverloadedRule(CollectorFaultRule):
    """Fed by Store.on_overload_change through AlertEngine.collector_overload: true while the store sheds
    snapshots (collector/store/shedding.py), so lost history is never silent. The last detail is kept when
    a report has none (the shedding goes on)."""

    name = "collector_overloaded"
    description = ("Writes to the history database fall behind the fleet's samples. Each host's history "
                   "keeps every k-th sample (rollups stay right, the gaps are marked as collector_shed "
                   "events); live views and alerts are unaffected. Give the collector faster storage or more "
                   "CPU, raise intervals, or split the fleet into shards.")

    def summary(self, detail: str) -> str:
        return f"collector overloaded: {detail}"

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        took = fmt_duration(now - alert.started_at)
        return f"collector caught up: every sample is stored again after {took}"


class OverBudgetRule(HostFlagRule):
    """Reads the flag the agent stream sets when it drops a host's excess (collector/transport/budget.py)."""

    name = "over_budget"

    def condition(self, ctx: HostContext, state: HostState) -> Condition | None:
        if not state.over_budget:
            return None
        return Condition(
            self.name, {"host": ctx.name},
            f"{ctx.name} sends more than its budget: the collector drops the excess",
            "A runaway or hostile agent (events or frames far above normal). What was dropped is summarised "
            "in the host's events (kind rate_limited).",
            annotations={"dropped_frames": str(state.dropped_frames),
                         "dropped_events": str(state.dropped_events)},
        )

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return f"{alert.labels.get('host')} is within its budget again"
