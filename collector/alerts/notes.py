"""Notes to the users whose processes an alert names (wasted, stale, underused): at most one per user per rule
per ``repeat_interval``, listing all their current alerts, mailed through the user notifier; a rule with a
``note_once_per`` parameter (underused) instead notes each process (pid + start time) at most once per that
long, whatever its alert does in between; and the "keep" note,
the exact command that keeps (silences) one user's alert, carried by the alert itself so every channel can
print it without knowing which rules name users.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.notify.build import USER_NOTIFIER, user_email
from gpufleet.collector.notify.message import KEEP
from gpufleet.collector.rules.catalog import BY_NAME, USER_RULES
from gpufleet.collector.rules.wording import keep_command
from gpufleet.collector.settings import AlertingConfig

NAGGED_AT = "user_notified_at"  # annotation: when the user was last told about this alert
ENGINE_ANNOTATIONS = (NAGGED_AT,)  # bookkeeping saved with the alert, never shown to a notifier

def _process_of(a: AlertRecord) -> tuple[str, str, str, str]:
    """(rule, host, pid, start time): the process an alert names, for once-per-process notes."""
    labels = a.labels
    return (a.rule, labels.get("host", ""), labels.get("pid", ""), a.annotations.get("process_start", ""))


def keep_annotations(a: AlertRecord) -> dict[str, str]:
    """``{"keep": "gpufleet silence add ..."}`` for an alert that names one user's process, else {}."""
    if a.rule in USER_RULES and a.labels.get("user"):
        return {KEEP: keep_command(a.labels, a.rule)}
    return {}


class UserNotes:
    """Who was told what when (restored from the alerts' ``user_notified_at`` after a restart)."""

    def __init__(self, alerting: AlertingConfig, once_per: dict[str, float] | None = None) -> None:
        self.alerting = alerting
        self.once_per = {rule: s for rule, s in (once_per or {}).items() if s > 0}  # rule -> seconds
        self._nags: dict[tuple[str, str], float] = {}  # (user, rule) -> last note to that user
        self._noted: dict[tuple[str, str, str, str], float] = {}  # process (once_per rules) -> last note

    def restore(self, a: AlertRecord) -> None:
        nagged = a.annotations.get(NAGGED_AT)
        user = a.labels.get("user")
        if nagged and user:
            with contextlib.suppress(ValueError):
                key = (user, a.rule)
                self._nags[key] = max(self._nags.get(key, 0.0), float(nagged))
                if a.rule in self.once_per:
                    proc = _process_of(a)
                    self._noted[proc] = max(self._noted.get(proc, 0.0), float(nagged))

    def email(self, user: str) -> str | None:
        return user_email(self.alerting, user)

    def due(self, alerts: Iterable[AlertRecord], muted: Callable[[AlertRecord], bool],
            copy: Callable[[AlertRecord], AlertRecord], mark: Callable[[AlertRecord], None],
            now: float) -> list[Notification]:
        """The notes due now; the alerts they cover get ``user_notified_at`` and are ``mark``-ed changed."""
        if not self.alerting.notify_users:
            return []
        by_user: dict[tuple[str, str], list[AlertRecord]] = {}
        for a in alerts:
            user = a.labels.get("user")
            if (a.state == "firing" and user and a.rule in USER_RULES and not muted(a)
                    and now - (a.fired_at or now) >= self.alerting.group_wait):
                by_user.setdefault((user, a.rule), []).append(a)
        for proc in [k for k, at in self._noted.items() if now - at >= self.once_per.get(k[0], 0.0)]:
            del self._noted[proc]  # bounded: a process's entry lives only as long as its window
        out: list[Notification] = []
        for (user, rule), mine in sorted(by_user.items()):
            if rule in self.once_per:  # each process once per window, not the user once per repeat
                mine = [a for a in mine if _process_of(a) not in self._noted]
                if not mine:
                    continue
            else:
                last = self._nags.get((user, rule))
                if last is not None and now - last < self.alerting.repeat_interval:
                    continue
            email = self.email(user)
            if email is None:
                continue
            hosts = ", ".join(sorted({a.labels.get("host", "") for a in mine}))
            what = BY_NAME[rule].note or f"has a {rule} alert"
            out.append(Notification(
                group_key=f'{{rule="{rule}",user="{user}"}}', status="firing",
                alerts=[copy(a) for a in mine], group_labels={"user": user, "rule": rule},
                kind="user", title=f"gpufleet: your GPU on {hosts} {what}",
                targets=frozenset({USER_NOTIFIER}), recipient=email, created_at=now))
            self._nags[(user, rule)] = now
            for a in mine:
                if rule in self.once_per:
                    self._noted[_process_of(a)] = now
                a.annotations[NAGGED_AT] = f"{now:.3f}"
                mark(a)
        return out
