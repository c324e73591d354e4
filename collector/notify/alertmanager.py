"""Alertmanager API v2: POST /api/v2/alerts, so sites route gpufleet alerts with the Alertmanager they have.

Alertmanager resolves an alert by itself when its endsAt passes, so firing alerts carry an endsAt a few
refresh periods ahead and are re-posted every ``refresh_interval`` (as Prometheus does); resolved alerts carry
their resolution time. Grouping, repeats and routing are then Alertmanager's.
"""

from __future__ import annotations

from gpufleet.collector.notify.base import Notification, Notifier
from gpufleet.collector.notify.http import JsonPoster
from gpufleet.collector.notify.message import alertmanager_alerts
from gpufleet.collector.secrets import redact_url, secret_parts
from gpufleet.collector.settings import NotifierConfig

API_PATH = "/api/v2/alerts"
REFRESH_INTERVAL = 60.0
HORIZON_REFRESHES = 4  # a firing alert stays firing in Alertmanager this many refreshes without news


def alerts_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(API_PATH) else base + API_PATH


class AlertmanagerNotifier(Notifier):
    kinds = frozenset({"alert", "refresh"})

    def __init__(self, config: NotifierConfig, url: str, shown_url: str, *,
                 refresh_interval: float = REFRESH_INTERVAL, generator_url: str | None = None) -> None:
        super().__init__(config)
        self.url, self.shown = alerts_url(url), redact_url(shown_url)
        self.headers = dict(config.headers)
        self.refresh_interval = refresh_interval
        self.generator_url = generator_url
        self.secret_values = [self.url, url, *secret_parts(url), *self.headers.values()]
        self._poster = JsonPoster(self.url, notifier=self.name, shown=self.shown, headers=self.headers,
                                  secrets=self.secret_values)

    def describe(self) -> str:
        return f"{self.name} (alertmanager {self.shown})"

    async def send(self, notification: Notification) -> None:
        now = notification.created_at
        horizon = HORIZON_REFRESHES * (self.refresh_interval or REFRESH_INTERVAL)
        body = alertmanager_alerts(notification, now, horizon=horizon, generator_url=self.generator_url)
        if not body:
            return
        await self._poster.post(body, deadline=self.timeout)

    async def close(self) -> None:
        await self._poster.close()
