"""JSON webhook: POST the Alertmanager-webhook-like payload (notify.message.webhook_payload) to a URL.

HTTP is asynchronous (notify.http): the notifier's timeout is an overall deadline per attempt.
"""

from __future__ import annotations

from gpufleet.collector.notify.base import Notification, Notifier
from gpufleet.collector.notify.http import JsonPoster
from gpufleet.collector.notify.message import webhook_payload
from gpufleet.collector.secrets import redact_url, secret_parts
from gpufleet.collector.settings import NotifierConfig


class WebhookNotifier(Notifier):
    def __init__(self, config: NotifierConfig, url: str, shown_url: str) -> None:
        super().__init__(config)
        self.url, self.shown = url, redact_url(shown_url)
        self.headers = dict(config.headers)
        self.secret_values = [url, *secret_parts(url), *self.headers.values()]
        self._poster = JsonPoster(url, notifier=self.name, shown=self.shown, headers=self.headers,
                                  secrets=self.secret_values)

    def describe(self) -> str:
        return f"{self.name} (webhook {self.shown})"

    async def send(self, notification: Notification) -> None:
        await self._poster.post(webhook_payload(notification, self.name), deadline=self.timeout)

    async def close(self) -> None:
        await self._poster.close()
