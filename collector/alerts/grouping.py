"""Grouping and dispatch, like Alertmanager's: alerts are grouped by ``alerting.group_by``; a group is first
sent ``group_wait`` after its first alert fired, later changes (new firing alerts, resolutions) at most every
``group_interval``, an unchanged firing group again every ``repeat_interval``. A flush turns a group into one
:class:`Notification` holding its current set (firing and newly resolved alerts) for the dispatcher, which
sends it only where it is news (notify.dispatcher compares it with what each destination accepted last).

One problem is one notification (issue 36): the alerts collector/model/problems.py calls one problem (a
job's idle peers and the wasted GPUs of the same job and user) form one group, keyed by the job and its
user, whatever ``group_by`` says; the notification names the GPUs. Its first notice waits up to one more
``group_interval`` for alerts of the problem still pending (a job's GPUs go wasted and idle_peers within
moments), so it says the whole problem at once. An alert keeps the group it was first sent in until it
resolves, so a problem that gains an alert later never moves one that was already sent.

Muted alerts are left out. An alert whose firing was sent always gets its resolved notice, even if it was
silenced in between. An alert about a destination (label ``notifier``) is never sent to that destination.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufleet.collector.alerts.fingerprint import group_key
from gpufleet.collector.alerts.lifecycle import needs_resolved_notice
from gpufleet.collector.model.problems import JOB, problems
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
        self._keys: dict[str, str] = {}  # fingerprint -> the group it is in (kept once it was sent)
        self._labels: dict[str, dict[str, str]] = {}  # a problem group's key -> its group labels

    def key(self, a: AlertRecord) -> str:
        """The alert's group: the one it was sent in, else its problem's (a job's), else ``group_by``'s."""
        return self._keys.get(a.fingerprint) or group_key(a.labels, self.alerting.group_by)

    def _assign(self, alerts: list[AlertRecord]) -> None:
        """Group keys for this flush: a job problem's alerts share one (pending ones included, so a wasted
        GPU that fires a moment before its job's idle_peers is already in the job's group)."""
        sent = {a.fingerprint for a in alerts if a.last_notified_at is not None}
        self._keys = {fp: key for fp, key in self._keys.items() if fp in sent}
        for p in problems(a for a in alerts if a.state != "resolved"):
            job = next((a.labels[JOB] for a in p.alerts if a.labels.get(JOB)), None)
            if job is None:
                continue
            labels = {JOB: job, "user": p.user, "host": p.hosts}
            key = group_key(labels, [JOB, "user"])
            self._labels[key] = labels
            for a in p.alerts:
                if a.fingerprint not in sent:  # not sent yet: free to join its problem's group
                    self._keys[a.fingerprint] = key
        used = set(self._keys.values())
        self._labels = {k: v for k, v in self._labels.items() if k in used}

    def flush(self, alerts: Iterable[AlertRecord], muted: Muted, copy: Copy, mark: Mark,
              now: float) -> list[Notification]:
        """The group notifications due now; the alerts sent get ``last_notified_at`` (and are marked)."""
        alerts = list(alerts)
        self._assign(alerts)
        members: dict[str, list[AlertRecord]] = {}
        waiting: set[str] = set()  # groups with an alert still pending
        for a in alerts:
            if a.state != "pending":
                members.setdefault(self.key(a), []).append(a)
            else:
                waiting.add(self.key(a))
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
                if key in waiting and key in self._labels:  # a problem's first notice waits for its
                    due += self.alerting.group_interval      # pending alerts, one group_interval at most
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
        labels = self._labels.get(key) or {k: alerts[0].labels.get(k, "") for k in self.alerting.group_by}
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
