"""The Notification the engine hands out, the Notifier interface every channel implements, and the
per-notifier filter (rules / min_severity / send_resolved / targets)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from gpufleet.collector.errors import NotifyError
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.catalog import severity_rank
from gpufleet.collector.settings import NotifierConfig

NotificationKind = Literal["alert", "refresh", "user", "report"]
Status = Literal["firing", "resolved"]

_ids = itertools.count(1)


@dataclass(slots=True)
class Notification:
    """One message to deliver.

    ``alert``: a group flush (firing and/or resolved alerts). ``refresh``: re-post of firing alerts for
    notifiers that need it (Alertmanager). ``user``: a direct note to the user named in ``recipient`` (about
    their alerts, or with no alerts and ``title``/``body`` pre-rendered: a job's end,
    collector/notify/jobnotes.py). ``report``: a waste report (``title``/``body`` pre-rendered, ``data`` the
    JSON form), status None, so no consumer reads it as an alert resolution.
    Alerts are copies taken at send time; their annotations are already rendered.
    """

    group_key: str
    status: Status | None  # None for kinds that are not about alerts (a report): no alert status at all
    alerts: list[AlertRecord] = field(default_factory=list)
    group_labels: dict[str, str] = field(default_factory=dict)
    kind: NotificationKind = "alert"
    title: str = ""  # "" -> rendered from the alerts by notify.message
    body: str = ""
    targets: frozenset[str] | None = None  # only these notifiers; None: all that are not targeted_only
    exclude: frozenset[str] = frozenset()  # never these (an alert about a destination goes to the others)
    recipient: str | None = None
    data: dict[str, Any] | None = None
    created_at: float = 0.0
    #: an alert group's state: a destination that already accepted the same firing set (and no newer
    #: resolved alerts) gets it again only this long after that one. None: always sent.
    repeat_interval: float | None = None
    id: int = field(default_factory=lambda: next(_ids))


class DeliveryError(NotifyError):
    """One delivery attempt failed. ``retryable``: 5xx, connection error, timeout, non-zero exit."""

    def __init__(self, notifier: str, message: str, *, retryable: bool) -> None:
        self.notifier, self.retryable = notifier, retryable
        super().__init__(f"notifier {notifier}: {message}")


class Notifier:
    """Base of every channel. Subclasses implement :meth:`send` and raise :class:`DeliveryError`."""

    #: notification kinds this channel handles
    kinds: ClassVar[frozenset[str]] = frozenset({"alert", "user", "report"})

    def __init__(self, config: NotifierConfig) -> None:
        self.config = config
        self.name = config.name
        self.targeted_only = False  # True: only notifications naming it in ``targets``
        self.refresh_interval: float | None = None  # re-post firing alerts this often (Alertmanager)
        #: resolved secret values (URL, tokens, header values) scrubbed from any error text before logging
        self.secret_values: list[str] = []

    @property
    def timeout(self) -> float:
        return self.config.timeout

    def describe(self) -> str:
        """Name and redacted destination: the only form of a notifier that reaches logs."""
        return f"{self.name} ({self.config.kind})"

    async def send(self, notification: Notification) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Release resources (nothing by default)."""


def prepare_for(notifier: Notifier, n: Notification) -> Notification | None:
    """The notification as this notifier should see it, or None when it gets nothing."""
    if n.kind not in notifier.kinds or notifier.name in n.exclude:
        return None
    if n.targets is not None:
        if notifier.name not in n.targets:
            return None
    elif notifier.targeted_only:
        return None
    if n.kind == "report" or (n.kind == "user" and not n.alerts):
        return n  # a report, or a note about no alert (a job's end, collector/notify/jobnotes.py): as it is
    cfg = notifier.config
    floor = severity_rank(cfg.min_severity)
    alerts = [
        a for a in n.alerts
        if (not cfg.rules or a.rule in cfg.rules)
        and severity_rank(a.severity) >= floor
        and (a.state == "firing" or cfg.send_resolved)
    ]
    if not alerts:
        return None
    if len(alerts) == len(n.alerts):
        return n
    status: Status = "firing" if any(a.state == "firing" for a in alerts) else "resolved"
    return dataclasses.replace(n, alerts=alerts, status=status)
