"""The alert lifecycle, like Alertmanager's: pending for ``for``, firing, resolved with a message; grouping,
group_wait / group_interval / repeat_interval, inhibition (a host that is down mutes its other alerts),
silences, direct notes to wasting users, and persistence so a restart neither re-sends nor forgets.

Data flow: the transport calls :meth:`frame` / :meth:`host_state` (synchronous, never raising); rules turn the
observation into conditions and :meth:`_reconcile` turns conditions into alert transitions in memory. The tick
(:meth:`evaluate`, every second, or called by tests with a fake clock) does everything time-driven: timeouts,
pending -> firing, group flushes, repeats, refreshes, and saving changed alerts to the store.

Notification rules:
- A group (``alerting.group_by`` labels) is first sent ``group_wait`` after its first alert fired; later
  changes (new firing alerts, resolutions) at most every ``group_interval``; an unchanged firing group is
  re-sent every ``repeat_interval``.
- Silenced or inhibited alerts still transition but are left out of notifications. When a silence ends,
  alerts already sent are not re-sent until their repeat is due; alerts that fired during it are new.
- An alert whose firing was sent always gets its resolved notice (so no chat keeps an alert that never
  clears), even if it was silenced in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpufleet.agent import wire
from gpufleet.collector.alerts.fingerprint import fingerprint, group_key
from gpufleet.collector.errors import QueryError
from gpufleet.collector.live import HostState
from gpufleet.collector.notify.base import Notification, Status
from gpufleet.collector.notify.build import USER_NOTIFIER
from gpufleet.collector.rules.base import (
    DURATION,
    USER_RULES,
    Condition,
    HostContext,
    Rule,
    matchers_match,
    selector_matches,
)
from gpufleet.collector.rules.hosts import COLLECTOR, StorageRule
from gpufleet.collector.rules.registry import build_rules
from gpufleet.collector.settings import Config
from gpufleet.collector.store.records import AlertRecord, SilenceRecord
from gpufleet.collector.units import fmt_duration

if TYPE_CHECKING:
    from gpufleet.collector.notify.dispatcher import NotificationDispatcher

log = logging.getLogger(__name__)

TICK = 1.0
SILENCE_RELOAD = 30.0  # pick up silences written to the store by others (the CLI while we run)
NAGGED_AT = "user_notified_at"  # annotation: when the user was last told about this alert
ENGINE_ANNOTATIONS = (NAGGED_AT,)


class AlertStore(Protocol):
    """The part of gpufleet.collector.store.Store the engine uses."""

    async def save_alerts(self, alerts: list[AlertRecord]) -> None: ...
    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[AlertRecord]: ...
    async def add_silence(self, silence: SilenceRecord) -> int: ...
    async def list_silences(self, *, include_expired: bool = False,
                            now: float | None = None) -> list[SilenceRecord]: ...
    async def expire_silence(self, silence_id: int, now: float) -> bool: ...


@dataclass(slots=True)
class _Group:
    last_flush: float | None = None


class AlertEngine:
    """Rules + alert lifecycle + notification scheduling. A FleetSink (collector/live.py)."""

    def __init__(self, config: Config, store: AlertStore | None, *, clock: Callable[[], float] = time.time,
                 dispatcher: NotificationDispatcher | None = None) -> None:
        self.config = config
        self.alerting = config.alerting
        self.store = store
        self.clock = clock
        self.dispatcher = dispatcher
        self.rules: dict[str, Rule] = build_rules(config.rules)
        self._hosts: dict[str, HostContext] = {}
        self._collector = HostContext(name=COLLECTOR)
        self._alerts: dict[str, AlertRecord] = {}
        self._templates: dict[str, Condition] = {}  # fingerprint -> latest condition (to re-render durations)
        self._scopes: dict[tuple[str, str], set[str]] = {}  # (rule, host) -> fingerprints
        self._groups: dict[str, _Group] = {}
        self._silences: list[SilenceRecord] = []
        self._silences_loaded_at = 0.0
        self._local_ids = itertools.count(1)
        self._dirty: dict[str, AlertRecord] = {}
        self._nags: dict[tuple[str, str], float] = {}  # (user, rule) -> last note to that user
        self._refreshed: dict[str, float] = {}  # notifier -> last refresh post
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._counters: dict[str, int] = {"alerts_fired": 0, "alerts_resolved": 0, "notifications": 0,
                                          "user_notifications": 0, "save_errors": 0}

    # ------------------------------------------------------------------------------------ lifecycle

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

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the tick, save every active alert, drain the dispatcher for up to ``timeout`` seconds."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for a in self._alerts.values():
            self._dirty.setdefault(a.fingerprint, a)
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
        unsent = [a for a in recent if a.state == "resolved" and _needs_resolved_notice(a)]
        for a in [*active, *unsent]:
            if a.fingerprint in self._alerts:
                continue
            rule = self.rules.get(a.rule)
            if rule is None:  # rule disabled since: close it quietly
                if a.state != "resolved":
                    a.state, a.resolved_at, a.updated_at = "resolved", now, now
                    a.annotations["resolved"] = f"rule {a.rule} is disabled"
                    self._dirty[a.fingerprint] = a
                continue
            self._track(a)
            host = a.labels.get("host")
            if host:
                self._ctx(host)  # so time-based rules (xid hold, host_down) see the host after a restart
            if a.state != "resolved":
                rule.restore(a)
            nagged = a.annotations.get(NAGGED_AT)
            user = a.labels.get("user")
            if nagged and user:
                with contextlib.suppress(ValueError):
                    key = (user, a.rule)
                    self._nags[key] = max(self._nags.get(key, 0.0), float(nagged))
        self._silences = silences
        self._silences_loaded_at = now
        log.info("loaded %d active alerts and %d silences", len(active), len(silences))

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
                self._reconcile(rule, ctx, rule.conditions(ctx, now), now)
        except Exception:  # noqa: BLE001 - a sink never raises into the transport
            log.exception("alert engine failed on host_state of %s", state.name)

    def frame(self, host: str, frame: wire.Frame, received: float) -> None:
        try:
            self._frame(host, frame, received)
        except Exception:  # noqa: BLE001
            log.exception("alert engine failed on a frame from %s", host)

    def _frame(self, host: str, frame: wire.Frame, received: float) -> None:
        ctx = self._ctx(host)
        ctx.last_frame = received
        if isinstance(frame, wire.Snapshot):
            ctx.snapshot, ctx.snapshot_received = frame, received
            for g in frame.gpus:
                ctx.uuids[g.index] = g.uuid
            for rule in self.rules.values():
                if rule.on_snapshot:
                    rule.observe_snapshot(ctx, frame, received)
                    self._reconcile(rule, ctx, rule.conditions(ctx, received), received)
        elif isinstance(frame, wire.Event):
            for rule in self.rules.values():
                if rule.observe_event(ctx, frame, received):
                    self._reconcile(rule, ctx, rule.conditions(ctx, received), received)
        elif isinstance(frame, wire.Hello):
            ctx.hello = frame
            for info in frame.gpus:
                ctx.uuids[info.index] = info.uuid

    def storage_health(self, ok: bool, message: str | None) -> None:
        rule = self.rules.get("storage")
        if isinstance(rule, StorageRule):
            rule.set_health(ok, message)
            now = self.clock()
            self._reconcile(rule, self._collector, rule.conditions(self._collector, now), now)

    def _ctx(self, host: str) -> HostContext:
        ctx = self._hosts.get(host)
        if ctx is None:
            hc = self.config.host(host)
            ctx = self._hosts[host] = HostContext(
                name=host, tags=list(hc.tags) if hc else [], interval=hc.interval if hc else 1.0)
        return ctx

    # ------------------------------------------------------------------------------ conditions -> alerts

    def _reconcile(self, rule: Rule, ctx: HostContext, conditions: list[Condition] | None,
                   now: float) -> None:
        """Make the alerts of (rule, host) match the rule's complete current set of conditions."""
        if conditions is None:
            return
        seen: set[str] = set()
        for c in conditions:
            if not selector_matches(rule.config.select, c.labels, ctx.tags):
                continue
            labels = {**c.labels, "rule": rule.name}
            fp = fingerprint(labels)
            seen.add(fp)
            a = self._alerts.get(fp)
            if a is None or a.state == "resolved":
                a = AlertRecord(fingerprint=fp, rule=rule.name, severity=c.severity or rule.severity,
                                state="pending", labels=labels, started_at=now, updated_at=now)
                self._track(a)
                self._dirty[fp] = a
            self._templates[fp] = c
            a.value = c.value
            a.severity = c.severity or rule.severity
            a.annotations = self._render(a, c, now)
            if a.state == "pending" and now - a.started_at >= rule.for_seconds:
                self._fire(a, now)
        for fp in list(self._scopes.get((rule.name, ctx.name), ())):
            a = self._alerts.get(fp)
            if fp not in seen and a is not None and a.state != "resolved":
                self._resolve(a, rule, ctx, now)

    def _render(self, a: AlertRecord, c: Condition, now: float) -> dict[str, str]:
        took = fmt_duration(now - a.started_at)
        annotations = {**c.annotations, "summary": c.summary.replace(DURATION, took)}
        if c.description:
            annotations["description"] = c.description.replace(DURATION, took)
        for key in ENGINE_ANNOTATIONS:
            if key in a.annotations:
                annotations[key] = a.annotations[key]
        return annotations

    def _track(self, a: AlertRecord) -> None:
        self._alerts[a.fingerprint] = a
        self._scopes.setdefault((a.rule, a.labels.get("host", COLLECTOR)), set()).add(a.fingerprint)

    def _untrack(self, a: AlertRecord) -> None:
        if self._alerts.get(a.fingerprint) is a:
            del self._alerts[a.fingerprint]
            self._templates.pop(a.fingerprint, None)
            scope = self._scopes.get((a.rule, a.labels.get("host", COLLECTOR)))
            if scope is not None:
                scope.discard(a.fingerprint)

    def _fire(self, a: AlertRecord, now: float) -> None:
        a.state, a.fired_at, a.updated_at = "firing", now, now
        self._dirty[a.fingerprint] = a
        self._counters["alerts_fired"] += 1
        log.info("firing %s %s: %s", a.rule, a.fingerprint, a.annotations.get("summary", ""))

    def _resolve(self, a: AlertRecord, rule: Rule, ctx: HostContext, now: float) -> None:
        was_firing = a.state == "firing"
        a.state, a.resolved_at, a.updated_at = "resolved", now, now
        if a.last_notified_at is not None and a.last_notified_at >= now:
            a.resolved_at = a.last_notified_at + 0.001  # keep "resolved after last notified" strict
        if was_firing:
            a.annotations["resolved"] = rule.resolved_message(a, ctx, now)
            self._counters["alerts_resolved"] += 1
            log.info("resolved %s %s: %s", a.rule, a.fingerprint, a.annotations["resolved"])
        self._dirty[a.fingerprint] = a

    # ------------------------------------------------------------------------------------ the tick

    async def evaluate(self, now: float | None = None) -> None:
        """One tick: time-based rules, pending -> firing, notifications, persistence."""
        async with self._lock:
            now = self.clock() if now is None else now
            await self._reload_silences(now)
            for rule in self.rules.values():
                if rule.time_based:
                    for ctx in list(self._hosts.values()):
                        self._reconcile(rule, ctx, rule.conditions(ctx, now), now)
            for a in list(self._alerts.values()):
                own = self.rules.get(a.rule)
                if a.state == "pending" and own is not None and now - a.started_at >= own.for_seconds:
                    self._fire(a, now)
            self._refresh(now)  # before the flush, so a first send is not immediately re-posted
            self._flush_groups(now)
            self._notify_users(now)
            self._cleanup()
            await self._persist()

    def _muted(self, a: AlertRecord, now: float) -> bool:
        return self._inhibited(a) or self._silenced(a, now)

    def _inhibited(self, a: AlertRecord) -> bool:
        host = a.labels.get("host")
        if a.rule == "host_down" or not host:
            return False
        down_labels = {"host": host, "rule": "host_down"}
        for labels in (down_labels, {**down_labels, "kind": "host_key"}):
            down = self._alerts.get(fingerprint(labels))
            if down is not None and down.state == "firing":
                return True
        return False

    def _silenced(self, a: AlertRecord, now: float) -> bool:
        return any(s.starts_at <= now < s.ends_at and matchers_match(s.matchers, a.labels)
                   for s in self._silences)

    def _copy(self, a: AlertRecord, now: float) -> AlertRecord:
        """What a notifier gets: current durations rendered, engine bookkeeping left out."""
        c = self._templates.get(a.fingerprint)
        if c is not None and a.state == "firing":
            a.annotations = self._render(a, c, now)
        shown = {k: v for k, v in a.annotations.items() if k not in ENGINE_ANNOTATIONS}
        return dataclasses.replace(a, labels=dict(a.labels), annotations=shown)

    def _flush_groups(self, now: float) -> None:
        members: dict[str, list[AlertRecord]] = {}
        for a in self._alerts.values():
            if a.state != "pending":
                members.setdefault(group_key(a.labels, self.alerting.group_by), []).append(a)
        for key in [k for k in self._groups if k not in members]:
            del self._groups[key]
        for key, alerts in members.items():
            group = self._groups.get(key)
            if group is None:
                sent = [a.last_notified_at for a in alerts if a.last_notified_at is not None]
                last = max(sent, default=None)
                group = self._groups[key] = _Group(last_flush=last)
            firing = [a for a in alerts if a.state == "firing" and not self._muted(a, now)]
            new = [a for a in firing if a.last_notified_at is None]
            done = [a for a in alerts if a.state == "resolved" and _needs_resolved_notice(a)]
            if not firing and not done:
                continue
            if group.last_flush is None:
                if not new:
                    continue
                due = min(a.fired_at or now for a in new) + self.alerting.group_wait
            elif new or done:
                due = group.last_flush + self.alerting.group_interval
            else:
                due = group.last_flush + self.alerting.repeat_interval
            if now >= due:
                self._send_group(key, group, firing + done, now)

    def _send_group(self, key: str, group: _Group, alerts: list[AlertRecord], now: float) -> None:
        copies = [self._copy(a, now) for a in alerts]
        status: Status = "firing" if any(a.state == "firing" for a in copies) else "resolved"
        labels = {k: alerts[0].labels.get(k, "") for k in self.alerting.group_by}
        self._submit(Notification(group_key=key, status=status, alerts=copies, group_labels=labels,
                                  kind="alert", created_at=now))
        for a in alerts:
            a.last_notified_at = max(now, a.resolved_at or now) if a.state == "resolved" else now
            self._dirty[a.fingerprint] = a
        group.last_flush = now
        self._counters["notifications"] += 1

    def _submit(self, n: Notification) -> None:
        if self.dispatcher is not None:
            self.dispatcher.submit(n)

    def _email(self, user: str) -> str | None:
        if user in self.alerting.user_emails:
            return self.alerting.user_emails[user]
        if self.alerting.user_email_domain and user not in ("unknown", "root") and not user.startswith("uid"):
            return f"{user}@{self.alerting.user_email_domain}"
        return None

    def _notify_users(self, now: float) -> None:
        """At most one note per user per rule per repeat_interval, listing all their current alerts."""
        if not self.alerting.notify_users:
            return
        by_user: dict[tuple[str, str], list[AlertRecord]] = {}
        for a in self._alerts.values():
            user = a.labels.get("user")
            if (a.state == "firing" and user and a.rule in USER_RULES and not self._muted(a, now)
                    and now - (a.fired_at or now) >= self.alerting.group_wait):
                by_user.setdefault((user, a.rule), []).append(a)
        for (user, rule), alerts in sorted(by_user.items()):
            last = self._nags.get((user, rule))
            if last is not None and now - last < self.alerting.repeat_interval:
                continue
            email = self._email(user)
            if email is None:
                continue
            hosts = ", ".join(sorted({a.labels.get("host", "") for a in alerts}))
            what = "is holding memory but idle" if rule == "wasted" else "has a stale process"
            self._submit(Notification(
                group_key=f'{{rule="{rule}",user="{user}"}}', status="firing",
                alerts=[self._copy(a, now) for a in alerts], group_labels={"user": user, "rule": rule},
                kind="user", title=f"gpufleet: your GPU on {hosts} {what}",
                targets=frozenset({USER_NOTIFIER}), recipient=email, created_at=now))
            self._nags[(user, rule)] = now
            self._counters["user_notifications"] += 1
            for a in alerts:
                a.annotations[NAGGED_AT] = f"{now:.3f}"
                self._dirty[a.fingerprint] = a

    def _refresh(self, now: float) -> None:
        """Re-post firing alerts to notifiers that forget them otherwise (Alertmanager's resolve_timeout)."""
        if self.dispatcher is None:
            return
        for notifier in self.dispatcher.refresh_notifiers():
            interval = notifier.refresh_interval or 60.0
            last = self._refreshed.get(notifier.name)
            if last is not None and now - last < interval:
                continue
            self._refreshed[notifier.name] = now
            alerts = [self._copy(a, now) for a in self._alerts.values()
                      if a.state == "firing" and a.last_notified_at is not None and not self._muted(a, now)]
            if alerts:
                self._submit(Notification(group_key="refresh", status="firing", alerts=alerts, kind="refresh",
                                          targets=frozenset({notifier.name}), created_at=now))

    def _cleanup(self) -> None:
        for a in list(self._alerts.values()):
            if a.state == "resolved" and not _needs_resolved_notice(a):
                self._untrack(a)

    async def _persist(self) -> None:
        if not self._dirty:
            return
        batch, self._dirty = self._dirty, {}
        if self.store is None:
            return
        copies = [dataclasses.replace(a, labels=dict(a.labels), annotations=dict(a.annotations))
                  for a in batch.values()]
        try:
            await self.store.save_alerts(copies)
        except BaseException as exc:  # keep them dirty: the next tick, or stop() when cancelled, saves them
            for fp, a in batch.items():
                self._dirty.setdefault(fp, a)
            if not isinstance(exc, Exception):
                raise
            self._counters["save_errors"] += 1
            log.warning("could not save %d alerts: %s", len(copies), exc)

    # ------------------------------------------------------------------------------------ silences

    async def _reload_silences(self, now: float) -> None:
        if self.store is None:
            self._silences = [s for s in self._silences if s.ends_at > now]
            return
        if now - self._silences_loaded_at < SILENCE_RELOAD and now >= self._silences_loaded_at:
            return
        try:
            self._silences = await self.store.list_silences(include_expired=False, now=now)
        except Exception as exc:  # noqa: BLE001 - keep the ones we have
            log.warning("could not reload silences: %s", exc)
        self._silences_loaded_at = now

    async def add_silence(self, matchers: dict[str, str], duration: float, comment: str = "",
                          created_by: str = "") -> SilenceRecord:
        """Mute alerts whose labels match every matcher (exact or glob) for ``duration`` seconds."""
        if not matchers or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                   for k, v in matchers.items()):
            raise QueryError("a silence needs at least one matcher like host=n3 or rule=wasted")
        if duration <= 0:
            raise QueryError(f"silence duration must be positive, got {duration:g} s")
        now = self.clock()
        silence = SilenceRecord(matchers=dict(matchers), starts_at=now, ends_at=now + duration,
                                created_by=created_by, comment=comment, created_at=now)
        if self.store is not None:
            silence.id = await self.store.add_silence(silence)
        else:
            silence.id = next(self._local_ids)
        self._silences.append(silence)
        log.info("silence %s added by %s for %s: %s", silence.id, created_by or "?", fmt_duration(duration),
                 matchers)
        return silence

    async def list_silences(self, include_expired: bool = False) -> list[SilenceRecord]:
        now = self.clock()
        if include_expired and self.store is not None:
            return await self.store.list_silences(include_expired=True, now=now)
        return [s for s in self._silences if include_expired or s.ends_at > now]

    async def expire_silence(self, silence_id: int) -> bool:
        now = self.clock()
        found = False
        for s in self._silences:
            if s.id == silence_id and s.ends_at > now:
                s.ends_at = now
                found = True
        if self.store is not None:
            found = await self.store.expire_silence(silence_id, now) or found
        return found

    # ------------------------------------------------------------------------------------ queries

    def active(self) -> list[AlertRecord]:
        """Pending and firing alerts (copies), oldest first."""
        alerts = [a for a in self._alerts.values() if a.state != "resolved"]
        return [dataclasses.replace(a, labels=dict(a.labels), annotations=dict(a.annotations))
                for a in sorted(alerts, key=lambda a: a.started_at)]

    def flags(self, host: str, gpu: int | None = None) -> set[str]:
        """Names of the rules firing for the host (with ``gpu``: for that GPU only)."""
        want = None if gpu is None else str(gpu)
        return {a.rule for a in self._alerts.values()
                if a.state == "firing" and a.labels.get("host") == host
                and (want is None or a.labels.get("gpu") == want)}

    def is_muted(self, alert: AlertRecord) -> bool:
        """Silenced or inhibited right now (for the API's alert listing)."""
        return self._muted(alert, self.clock())

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
        out["active"] = sum(1 for a in self._alerts.values() if a.state != "resolved")
        out["firing"] = sum(1 for a in self._alerts.values() if a.state == "firing")
        return out


def _needs_resolved_notice(a: AlertRecord) -> bool:
    return a.last_notified_at is not None and a.resolved_at is not None and a.last_notified_at < a.resolved_at
