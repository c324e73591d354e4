"""JSON webhook: POST the Alertmanager-webhook-like payload (notify.message.webhook_payload) to a URL.

HTTP goes through urllib in a worker thread: no new dependency, and the notifier's timeout bounds both the
connect and each read. Environment proxies are honoured except for loopback destinations.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.message import webhook_payload
from gpufleet.collector.notify.secrets import redact_text, redact_url, secret_parts
from gpufleet.collector.settings import NotifierConfig

USER_AGENT = "gpufleet-collector"
MAX_RESPONSE = 64 * 1024


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``http://user:pw@host/x`` -> (``http://host/x``, Basic auth header): urllib does not read credentials
    from the URL (it would try to resolve ``user:pw@host``), and Alertmanager behind basic auth is common."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    host = parts.netloc.rpartition("@")[2]
    creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    header = {"Authorization": "Basic " + base64.b64encode(creds).decode()}
    return urlunsplit(parts._replace(netloc=host)), header


@lru_cache(maxsize=2)
def _opener(direct: bool) -> urllib.request.OpenerDirector:
    if direct:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def post_json_sync(url: str, payload: Any, *, headers: dict[str, str], timeout: float, notifier: str,
                   shown: str, secrets: list[str] | None = None) -> int:
    """POST ``payload`` as JSON; the status on 2xx, else :class:`DeliveryError` (retryable on 5xx / network).

    ``shown`` is the redacted destination used in every message; nothing else of the URL is printed.
    """
    data = json.dumps(payload, separators=(",", ":")).encode()
    url, auth = split_userinfo(url)
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": USER_AGENT, **auth, **headers})
    opener = _opener(_is_loopback(urlsplit(url).hostname))
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(MAX_RESPONSE)
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        retry = exc.code >= 500
        raise DeliveryError(notifier, f"{shown} answered HTTP {exc.code}", retryable=retry) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = "timed out" if isinstance(reason, (TimeoutError, socket.timeout)) else str(reason)
        text = redact_text(text, secrets or [])
        # a network failure (an OSError reason) may pass; "unknown url type" and the like never will
        raise DeliveryError(notifier, f"{shown}: {text}", retryable=isinstance(reason, OSError)) from None
    except TimeoutError:
        raise DeliveryError(notifier, f"{shown}: timed out after {timeout:g} s", retryable=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(notifier, f"{shown}: {type(exc).__name__}", retryable=True) from None


class WebhookNotifier(Notifier):
    def __init__(self, config: NotifierConfig, url: str, shown_url: str) -> None:
        super().__init__(config)
        self.url, self.shown = url, redact_url(shown_url)
        self.headers = dict(config.headers)
        self.secret_values = [url, *secret_parts(url), *self.headers.values()]

    def describe(self) -> str:
        return f"{self.name} (webhook {self.shown})"

    async def send(self, notification: Notification) -> None:
        payload = webhook_payload(notification, self.name)
        await asyncio.to_thread(post_json_sync, self.url, payload, headers=self.headers, timeout=self.timeout,
                                notifier=self.name, shown=self.shown,
                                secrets=self.secret_values)
