"""Apprise: Slack, e-mail, Telegram, ntfy, Matrix ... anything apprise has a URL for.

apprise is an optional extra (``pip install 'gpufleet[notify]'``) with heavy dependencies, so it is imported
only when an apprise notifier is configured. Its notify() is blocking: it runs in apprise's own small thread
pool (an abandoned, still-hanging try holds a thread there, never one of the default executor the rest of
the collector shares), bounded by the notifier's timeout. A failed send cannot be told apart by cause, so it
counts as retryable.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from gpufleet.collector.errors import ConfigError
from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.message import body, title
from gpufleet.collector.secrets import guard_apprise_logs, redact_url, secret_parts
from gpufleet.collector.settings import NotifierConfig

#: apprise's plugins block; they get these threads and no others
APPRISE_THREADS = 4
_executor: ThreadPoolExecutor | None = None


async def _in_apprise_thread(fn: Callable[..., Any], timeout: float, **kwargs: Any) -> Any:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(APPRISE_THREADS, thread_name_prefix="gpufleet-apprise")
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(_executor, functools.partial(fn, **kwargs)), timeout)


def load_apprise(notifier: str) -> Any:
    try:
        import apprise
    except ImportError:
        raise ConfigError("apprise is not installed; install it with: pip install 'gpufleet[notify]'",
                          key=f"notifiers.{notifier}") from None
    return apprise


def _notify_type(apprise: Any, n: Notification) -> Any:
    if n.kind == "report":
        return apprise.NotifyType.INFO
    if n.status == "resolved":
        return apprise.NotifyType.SUCCESS
    severities = {a.severity for a in n.alerts if a.state == "firing"}
    if "critical" in severities:
        return apprise.NotifyType.FAILURE
    if "warning" in severities:
        return apprise.NotifyType.WARNING
    return apprise.NotifyType.INFO


class AppriseNotifier(Notifier):
    def __init__(self, config: NotifierConfig, url: str, shown_url: str) -> None:
        super().__init__(config)
        self._apprise = load_apprise(config.name)
        self.shown = redact_url(shown_url)
        self.secret_values = [url, *secret_parts(url)]
        guard_apprise_logs(self.secret_values)
        self._target = self._apprise.Apprise()
        if not self._target.add(url):
            raise ConfigError(f"apprise does not understand the URL {self.shown}",
                              key=f"notifiers.{config.name}")

    def describe(self) -> str:
        return f"{self.name} (apprise {self.shown})"

    async def send(self, notification: Notification) -> None:
        ok = await _in_apprise_thread(self._target.notify, self.timeout, body=body(notification),
                                      title=title(notification),
                                      notify_type=_notify_type(self._apprise, notification))
        if not ok:
            raise DeliveryError(self.name, f"apprise could not deliver to {self.shown}", retryable=True)


class UserNotifier(Notifier):
    """Mail (or any apprise URL taking ``to=``) straight to the user a note is addressed to."""

    kinds = frozenset({"user"})

    def __init__(self, config: NotifierConfig, base_url: str, shown_url: str) -> None:
        super().__init__(config)
        self._apprise = load_apprise(config.name)
        self.base, self.shown = base_url, redact_url(shown_url)
        self.targeted_only = True
        self.secret_values = [base_url, *secret_parts(base_url)]
        guard_apprise_logs(self.secret_values)
        if self._apprise.Apprise.instantiate(self.url_for("probe@example.org")) is None:
            raise ConfigError(f"apprise does not understand the user notifier URL {self.shown}",
                              key="alerting.user_notifier")

    def url_for(self, address: str) -> str:
        sep = "&" if "?" in self.base else "?"
        return f"{self.base}{sep}to={quote(address, safe='@')}"

    def describe(self) -> str:
        return f"{self.name} (user mail via {self.shown})"

    async def send(self, notification: Notification) -> None:
        if not notification.recipient:
            return
        target = self._apprise.Apprise()
        if not target.add(self.url_for(notification.recipient)):
            raise DeliveryError(self.name, f"bad recipient for {self.shown}", retryable=False)
        ok = await _in_apprise_thread(target.notify, self.timeout, body=body(notification),
                                      title=title(notification),
                                      notify_type=_notify_type(self._apprise, notification))
        if not ok:
            raise DeliveryError(self.name, f"could not deliver a user note via {self.shown}", retryable=True)
