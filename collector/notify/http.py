"""Asynchronous JSON POST for the HTTP notifiers (webhook, Alertmanager), on httpx.

Why async: with urllib in worker threads, a receiver that trickles its answer kept one thread of the
default executor per abandoned try, and every notifier, /metrics and getaddrinfo shared that pool. Here an
attempt is a coroutine: the overall deadline (``asyncio.wait_for`` around the whole exchange, connect to
last body byte) cancels it cleanly, and a slow body cannot outlive it, as httpx's own timeouts are per read.
Why httpx rather than aiohttp: pure Python (no C extensions to build on the collector host), a small
dependency tree, and the same API sync and async; aiohttp's ``ClientTimeout(total=)`` would do the same job.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import logging
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from gpufleet.collector.notify.base import DeliveryError
from gpufleet.collector.secrets import redact_text

USER_AGENT = "gpufleet-collector"
MAX_RESPONSE = 64 * 1024
# httpx logs every request URL at INFO, httpcore every step at DEBUG: a webhook URL is a secret (Slack)
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)


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
    """``http://user:pw@host/x`` -> (``http://host/x``, Basic auth header), so the credentials never travel
    in a URL that an error message could quote (Alertmanager behind basic auth is common)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    host = parts.netloc.rpartition("@")[2]
    creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    header = {"Authorization": "Basic " + base64.b64encode(creds).decode()}
    return urlunsplit(parts._replace(netloc=host)), header


class JsonPoster:
    """One destination: its own connection pool; environment proxies honoured except for loopback."""

    def __init__(self, url: str, *, notifier: str, shown: str, headers: dict[str, str],
                 secrets: list[str]) -> None:
        self.url, auth = split_userinfo(url)
        self.notifier, self.shown, self.secrets = notifier, shown, secrets
        self.headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **auth, **headers}
        self._client: httpx.AsyncClient | None = None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            direct = _is_loopback(urlsplit(self.url).hostname)
            self._client = httpx.AsyncClient(trust_env=not direct, follow_redirects=False)
        return self._client

    async def post(self, payload: Any, *, deadline: float) -> int:
        """POST ``payload`` as JSON within ``deadline`` seconds in all (connect, send, the whole answer);
        the status on 2xx, else :class:`DeliveryError` (retryable on 5xx, network errors and timeouts)."""
        data = json.dumps(payload, separators=(",", ":")).encode()
        try:
            return await asyncio.wait_for(self._exchange(data, deadline), deadline)
        except asyncio.TimeoutError:
            raise DeliveryError(self.notifier, f"{self.shown}: timed out after {deadline:g} s",
                                retryable=True) from None

    async def _exchange(self, data: bytes, deadline: float) -> int:
        try:
            async with self._get_client().stream("POST", self.url, content=data, headers=self.headers,
                                                 timeout=deadline) as response:
                got = 0
                async for chunk in response.aiter_raw():
                    got += len(chunk)
                    if got >= MAX_RESPONSE:
                        break
                status = response.status_code
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            text = redact_text(str(exc), self.secrets)
            raise DeliveryError(self.notifier, f"{self.shown}: {text}", retryable=False) from None
        except httpx.TimeoutException:
            raise DeliveryError(self.notifier, f"{self.shown}: timed out after {deadline:g} s",
                                retryable=True) from None
        except (httpx.HTTPError, OSError) as exc:
            text = redact_text(str(exc), self.secrets) or type(exc).__name__
            raise DeliveryError(self.notifier, f"{self.shown}: {text}", retryable=True) from None
        if status >= 300:
            raise DeliveryError(self.notifier, f"{self.shown} answered HTTP {status}",
                                retryable=status >= 500)
        return status

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
