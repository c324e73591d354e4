"""The alert engine: a FleetSink (collector/fleet/live.py) that feeds observations to the rules and
orchestrates the parts of alerting, each with one owner:

- alerts.lifecycle: conditions -> pending -> firing -> resolved (``for``, ``keep_firing_for``);
- alerts.grouping: group_by, group_wait / group_interval / repeat_interval -> Notifications;
- alerts.silences: silences and inhibition (muting);
- alerts.notes: notes to wasting users and the "keep" command an alert carries;
- the store persists alerts and silences (this module loads and saves them); the dispatcher delivers.

Data flow: the transport calls :meth:`frame` / :meth:`host_state` (synchronous, never raising); rules turn the
observation into conditions and the lifecycle turns conditions into alert transitions in memory. The tick
(:meth:`evaluate`, every second, or called by tests with a fake clock) does everything time-driven: timeouts,
pending -> firing, group flushes, repeats, refreshes, user notes, and saving changed alerts (and the
dispatcher's notification log) to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

from gpufleet.agent import wire
from gpufleet.collector.alerts.grouping import Grouper
from gpufleet.collector.alerts.lifecycle import Lifecycle, needs_resolved_notice
from gpufleet.collector.alerts.notes import UserNotes
from gpufleet.collector.alerts.silences import Silences, SilenceStore, inhibited
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.rules.base import HostContext
from gpufleet.collector.rules.hosts import COLLECTOR, CollectorFaultRule, NotifierDownRule
from gpufleet.collector.rules.registry import build_rules
from gpufleet.collector.settings import Config

log = logging.getLogger(__name__)

TICK = 1.0


class AlertStore(SilenceStore, Protocol):
    """The part of gpufleet.collector.store.Store the engine uses."""

    async def save_alerts(self, alerts: list[AlertRecord]) -> None: ...
    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[AlertRecord]: ...


class AlertEngine:
    """Rules + alert lifecycle + notification scheduling. A FleetSink (collector/fleet/live.py)."""

    def __init__(self, config: Config, store: AlertStore | None, *, clock: Callable[[], float] = time.time,
                 dispatcher: NotificationDispatcher | None = None, facts: FleetFacts | None = None) -> None:
        self.config = config
        self.alerting = config.alerting
        self.store = store
        self.clock = clock
        self.dispatcher = dispatcher
        #: each host's latest snapshot classified once for every rule (and the job tracker, which shares it)
        self.facts = facts if facts is not None else FleetFacts(thresholds_of(config.rules))
        self.rules = build_rules(config.rules, self.facts.thresholds)
        self._per_snapshot = [rule for rule in self.rules.values() if rule.on_snapshot]
        self._counters: dict[str, int] = {"alerts_fired": 0, "alerts_resolved": 0, "notifications": 0,
                                          "user_notifications": 0, "save_errors": 0}
        self._hosts: dict[str, HostContext] = {}
        self._collector = HostContext(name=COLLECTOR)
        self.lifecycle = Lifecycle(self.rules, self._counters)
        self.grouper = Grouper(self.alerting)
        self.silences = Silences(store, clock)
        self.notes = UserNotes(self.alerting, {name: once for name, rule in self.rules.items()
                                               if (once := rule.note_once_per()) is not None})
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------------------------ start / stop

    async def start(self, *, run_tick: bool = True) -> None:
        """Load persisted alerts and silences, start the dispatcher and the tick (tests with a fake clock
        pass ``run_tick=False`` and call :meth:`evaluate` themselves)."""
        now = self.clock()
        if self.store is not None:
            await self._load(now)
        if self.dispatcher is not None:
            await self.dispatcher.start()
        if self._task is None and run_tick:
            self._task = asyncio.create_task(self._run(), name="alert-engine")

    async def halt(self) -> None:
        """Stop judging the hosts: the tick ends (no more time-based conditions, no more transitions).
        The daemon calls this first when it stops, before it stops listening and hangs up: the silence
        that follows is the collector's own, not an observation of the hosts (a host silent for 3 intervals
        while the transport closes is not down). Notifications already queued are still delivered."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the tick, save every active alert, drain the dispatcher for up to ``timeout`` seconds."""
        await self.halt()
        for a in self.lifecycle.alerts.values():
            self.lifecycle.mark(a)
        await self._persist()
        if self.dispatcher is not None:
            await self.dispatcher.stop(timeout)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                await self.evaluate()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad tick must not end alerting
                log.exception("alert engine tick failed")

    async def _load(self, now: float) -> None:
        assert self.store is not None
        try:
            active = await self.store.load_alerts(active_only=True)
            horizon = now - max(2 * self.alerting.group_interval, 3600.0)
            recent = await self.store.load_alerts(active_only=False, since=horizon)
            silences = await self.store.list_silences(include_expired=False, now=now)
        except Exception as exc:  # noqa: BLE001 - start without history rather than not at all
            log.error("could not load alert state from the store: %s", exc)
            return
        unsent = [a for a in recent if a.state == "resolved" and needs_resolved_notice(a)]
        for a in [*active, *unsent]:
            if a.fingerprint in self.lifecycle.alerts:
                continue
            rule = self.rules.get(a.rule)
            if rule is None:  # rule disabled since: close it quietly
                if a.state != "resolved":
                    a.state, a.resolved_at, a.updated_at = "resolved", now, now
                    a.annotations["resolved"] = f"rule {a.rule} is disabled"
                    self.lifecycle.mark(a)
                continue
            self.lifecycle.track(a)
            host = a.labels.get("host")
            if host:
                self._ctx(host)  # so time-based rules (xid hold, host_down) see the host after a restart
            if a.state != "resolved":
                rule.restore(a)
            self.notes.restore(a)
        self.silences.loaded(silences, now)
        log.info("loaded %d active alerts and %d silences", len(active), len(silences))

    async def _persist(self) -> None:
        lc = self.lifecycle
        if not lc.dirty:
            return
        batch, lc.dirty = lc.dirty, {}
        if self.store is None:
            return
        copies = [dataclasses.replace(a, labels=dict(a.labels), annotations=dict(a.annotations))
                  for a in batch.values()]
        try:
            await self.store.save_alerts(copies)
        except BaseException as exc:  # keep them dirty: the next tick, or stop() when cancelled, saves them
            for fp, a in batch.items():
                lc.dirty.setdefault(fp, a)
            if not isinstance(exc, Exception):
                raise
            self._counters["save_errors"] += 1
            log.warning("could not save %d alerts: %s", len(copies), exc)

    # ------------------------------------------------------------------------------------ FleetSink

    def host_state(self, state: HostState) -> None:
        try:
            ctx = self._ctx(state.name)
            # a copy: the transport updates its object in place, and a tick must judge only what was reported
            ctx.state = dataclasses.replace(state, tags=list(state.tags))
            if state.tags:
                ctx.tags = list(state.tags)
            rule = self.rules.get("host_down")
            if rule is not None:
                now = self.clock()
                self.lifecycle.reconcile(rule, ctx, rule.conditions(ctx, now), now)
        except Exception:  # noqa: BLE001 - a sink never raises into the transport
            log.exception("alert engine failed on host_state of %s", state.name)

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        try:
            self._frame(host, frame, received)
        except Exception:  # noqa: BLE001
            log.exception("alert engine failed on a frame from %s", host)

    def _frame(self, host: str, frame: sample.Frame, received: float) -> None:
        ctx = self._ctx(host)
        ctx.last_frame = received
        if isinstance(frame, sample.Snapshot):
            ctx.snapshot, ctx.snapshot_received = frame, received
            ctx.facts = self.facts.of(host, frame)
            for g in frame.gpus:
                ctx.uuids[g.index] = g.uuid
            reconcile = self.lifecycle.reconcile
            for rule in self._per_snapshot:
                rule.observe_snapshot(ctx, frame, received)
                reconcile(rule, ctx, rule.conditions(ctx, received), received)
        elif isinstance(frame, wire.Event):
            for rule in self.rules.values():
                if rule.observe_event(ctx, frame, received):
                    self.lifecycle.reconcile(rule, ctx, rule.conditions(ctx, received), received)
        elif isinstance(frame, wire.Hello):
            ctx.hello = frame
            for info in frame.gpus:
                ctx.uuids[info.index] = info.uuid

    def storage_health(self, ok: bool, message: str | None) -> None:
        self._collector_fault("storage", not ok, message)

    def collector_overload(self, shedding: bool, message: str | None) -> None:
        """The store started or stopped shedding snapshots (Store.on_overload_change)."""
        self._collector_fault("collector_overloaded", shedding, message)

    def _collector_fault(self, rule_name: str, faulty: bool, detail: str | None) -> None:
        rule = self.rules.get(rule_name)
        if isinstance(rule, CollectorFaultRule):
            rule.report(faulty, detail)
            now = self.clock()
            self.lifecycle.reconcile(rule, self._collector, rule.conditions(self._collector, now), now)

    def _ctx(self, host: str) -> HostContext:
        ctx = self._hosts.get(host)
        if ctx is None:
            hc = self.config.host(host)
            ctx = self._hosts[host] = HostContext(
                name=host, tags=list(hc.tags) if hc else [], interval=hc.interval if hc else 1.0)
        return ctx

    # ------------------------------------------------------------------------------------ the tick

    async def evaluate(self, now: float | None = None) -> None:
        """One tick: time-based rules, pending -> firing, notifications, persistence."""
        async with self._lock:
            now = self.clock() if now is None else now
            lc = self.lifecycle
            await self.silences.reload(now)
            for rule in self.rules.values():
                if rule.time_based:
                    for ctx in list(self._hosts.values()):
                        lc.reconcile(rule, ctx, rule.conditions(ctx, now), now)
            self._watch_notifiers(now)
            lc.promote(now)

            def muted(a: AlertRecord) -> bool:
                return self._muted(a, now)

            def copy(a: AlertRecord) -> AlertRecord:
                return lc.copy(a, now)

            if self.dispatcher is not None:  # before the flush, so a first send is not immediately re-posted
                self._submit(self.grouper.refresh(self.dispatcher.refresh_notifiers(), lc.firing(), muted,
                                                  copy, now))
            sent = self._submit(self.grouper.flush(list(lc.alerts.values()), muted, copy, lc.mark, now))
            self._counters["notifications"] += sent
            notes = self._submit(self.notes.due(list(lc.alerts.values()), muted, copy, lc.mark, now))
            self._counters["user_notifications"] += notes
            lc.cleanup()
            await self._persist()
            if self.dispatcher is not None:  # the notification log too, so a kill -9 loses no retry
                await self.dispatcher.persist()

    def _watch_notifiers(self, now: float) -> None:
        """notifier_down: the destinations that have accepted nothing for ``notifier_down_after``."""
        rule = self.rules.get("notifier_down")
        if isinstance(rule, NotifierDownRule) and self.dispatcher is not None:
            rule.set_failing(self.dispatcher.failing(), self.dispatcher.last_error,
                             self.alerting.notifier_down_after)
            self.lifecycle.reconcile(rule, self._collector, rule.conditions(self._collector, now), now)

    def _submit(self, notifications: list[Notification]) -> int:
        if self.dispatcher is not None:
            for n in notifications:
                self.dispatcher.submit(n)
        return len(notifications)

    def _muted(self, a: AlertRecord, now: float) -> bool:
        return inhibited(a, self.lifecycle.alerts) or self.silences.silenced(a.labels, now)

    # ------------------------------------------------------------------------------------ silences

    async def add_silence(self, matchers: dict[str, str], duration: float, comment: str = "",
                          created_by: str = "") -> SilenceRecord:
        """Mute alerts whose labels match every matcher (exact or glob) for ``duration`` seconds."""
        return await self.silences.add(matchers, duration, comment, created_by)

    async def list_silences(self, include_expired: bool = False) -> list[SilenceRecord]:
        return await self.silences.listing(include_expired)

    async def expire_silence(self, silence_id: int) -> bool:
        return await self.silences.expire(silence_id)

    # ------------------------------------------------------------------------------------ queries

    def active(self) -> list[AlertRecord]:
        """Pending and firing alerts (copies), oldest first."""
        return self.lifecycle.active()

    def firing(self) -> Firing:
        """Which rules fire on which GPU and host now (one pass over the alerts, no copies)."""
        return Firing(self.lifecycle.alerts.values())

    def is_muted(self, alert: AlertRecord) -> bool:
        """Silenced or inhibited right now (for the API's alert listing)."""
        return self._muted(alert, self.clock())

    def undelivered(self, alert: AlertRecord) -> dict[str, float]:
        """Destination -> since when the newest notification of the alert's group has failed to get there."""
        if self.dispatcher is None:
            return {}
        return self.dispatcher.undelivered(self.grouper.key(alert))

    @property
    def queue_depth(self) -> int:
        return self.dispatcher.queue_depth if self.dispatcher is not None else 0

    @property
    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        if self.dispatcher is not None:
            out.update(self.dispatcher.stats)
        else:
            out.update({"sent": 0, "failed": 0, "dropped": 0, "retries": 0, "submitted": 0})
        alerts = self.lifecycle.alerts.values()
        out["active"] = sum(1 for a in alerts if a.state != "resolved")
        out["firing"] = sum(1 for a in alerts if a.state == "firing")
        return out
