"""Grouping and dispatch, like Alertmanager's: alerts are grouped by ``alerting.group_by``; a group is first
sent ``group_wait`` after its first alert fired, later changes (new firing alerts, resolutions) at most every
``group_interval``, an unchanged firing group again every ``repeat_interval``. A flush turns a group into one
:class:`Notification` holding its current set (firing and newly resolved alerts) for the dispatcher, which
sends it only where it is news (notify.dispatcher compares it with what each destination accepted last).

Muted alerts are left out. An alert whose firing was sent always gets its resolved notice, even if it was
silenced in between. An alert about a destination (label ``notifier``) is never sent to that destination.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufleet.collector.alerts.fingerprint import group_key
from gpufleet.collector.alerts.lifecycle import needs_resolved_notice
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification, Notifier, Status
from gpufleet.collector.settings import AlertingConfig

#: an alert label naming a notification destination: the alert is about it, so it goes to the others
ABOUT_NOTIFIER = "notifier"


@dataclass(slots=True)
class _Group:
    last_flush: float | None = None


Copy = Callable[[AlertRecord], AlertRecord]
Muted = Callable[[AlertRecord], bool]
Mark = Callable[[AlertRecord], None]


class Grouper:
    """Owns each group's flush times."""

    def __init__(self, alerting: AlertingConfig) -> None:
        self.alerting = alerting
        self._groups: dict[str, _Group] = {}
        self._refreshed: dict[str, float] = {}  # notifier -> last refresh post

    def key(self, a: AlertRecord) -> str:
        return group_key(a.labels, self.alerting.group_by)

    def flush(self, alerts: Iterable[AlertRecord], muted: Muted, copy: Copy, mark: Mark,
              now: float) -> list[Notification]:
        """The group notifications due now; the alerts sent get ``last_notified_at`` (and are marked)."""
        members: dict[str, list[AlertRecord]] = {}
        for a in alerts:
            if a.state != "pending":
                members.setdefault(self.key(a), []).append(a)
        for key in [k for k in self._groups if k not in members]:
            del self._groups[key]
        out: list[Notification] = []
        for key, group_alerts in members.items():
            group = self._groups.get(key)
            if group is None:
                sent = [a.last_notified_at for a in group_alerts if a.last_notified_at is not None]
                group = self._groups[key] = _Group(last_flush=max(sent, default=None))
            firing = [a for a in group_alerts if a.state == "firing" and not muted(a)]
            new = [a for a in firing if a.last_notified_at is None]
            done = [a for a in group_alerts if a.state == "resolved" and needs_resolved_notice(a)]
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
                out.append(self._notification(key, firing + done, copy, now))
                for a in firing + done:
                    a.last_notified_at = max(now, a.resolved_at or now) if a.state == "resolved" else now
                    mark(a)
                group.last_flush = now
        return out

    def _notification(self, key: str, alerts: list[AlertRecord], copy: Copy, now: float) -> Notification:
        copies = [copy(a) for a in alerts]
        status: Status = "firing" if any(a.state == "firing" for a in copies) else "resolved"
        labels = {k: alerts[0].labels.get(k, "") for k in self.alerting.group_by}
        about = frozenset(a.labels[ABOUT_NOTIFIER] for a in alerts if a.labels.get(ABOUT_NOTIFIER))
        return Notification(group_key=key, status=status, alerts=copies, group_labels=labels, kind="alert",
                            exclude=about, created_at=now, repeat_interval=self.alerting.repeat_interval)

    def refresh(self, notifiers: list[Notifier], firing: list[AlertRecord], muted: Muted, copy: Copy,
                now: float) -> list[Notification]:
        """Re-post firing alerts to notifiers that forget them otherwise (Alertmanager's resolve_timeout)."""
        out: list[Notification] = []
        for notifier in notifiers:
            interval = notifier.refresh_interval or 60.0
            last = self._refreshed.get(notifier.name)
            if last is not None and now - last < interval:
                continue
            self._refreshed[notifier.name] = now
            alerts = [copy(a) for a in firing
                      if a.last_notified_at is not None and not muted(a)
                      and a.labels.get(ABOUT_NOTIFIER) != notifier.name]
            if alerts:
                out.append(Notification(group_key="refresh", status="firing", alerts=alerts, kind="refresh",
                                        targets=frozenset({notifier.name}), created_at=now))
        return out
