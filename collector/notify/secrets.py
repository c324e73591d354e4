"""Secrets in notifier settings: read from env vars or files, never written to logs.

The config loader (collector/config.py) already expands ``${VAR}``, ``env:VAR`` and ``file:/path`` in YAML;
this module resolves the whole-value ``env:NAME`` / ``file:/path`` forms again for configs built in code, so
``build_notifiers`` works the same either way. Logs only ever show :func:`redact_url`: the scheme and, for
http(s), the host; never a path, query or user info (tokens live there).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlsplit

from gpufleet.collector.errors import ConfigError


def resolve_secret(value: str, *, where: str) -> str:
    """Resolve one configured value (a file's first line, as the config loader reads it); ``where`` (e.g.
    ``notifiers.slack.urls[0]``) goes into errors."""
    if value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise ConfigError(f"environment variable {name} is not set", key=where)
        return os.environ[name]
    if value.startswith("file:"):
        path = Path(value[5:]).expanduser()
        try:
            lines = path.read_text().splitlines()
            return lines[0].strip() if lines else ""
        except OSError as exc:
            raise ConfigError(f"cannot read secret file {path}: {exc.strerror}", key=where) from None
    return value


def redact_url(url: str) -> str:
    """Safe to log: ``https://hooks.slack.com/***``, ``slack://***``, ``env:SLACK_URL`` (names only)."""
    if url.startswith(("env:", "file:")):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if not parts.scheme or "://" not in url:
        return "***"
    if parts.scheme.lower() not in ("http", "https"):
        return f"{parts.scheme}://***"  # apprise URLs carry tokens in every part
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return f"{parts.scheme}://***"
    if not host:
        return f"{parts.scheme}://***"
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    rest = "/***" if (parts.path not in ("", "/") or parts.query or parts.username) else ""
    return f"{parts.scheme}://{netloc}{rest}"


def redact_text(text: str, secrets: list[str]) -> str:
    """Scrub known secret values out of an error message before it is logged."""
    for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


_TOKEN_SPLIT = re.compile(r"[/:@?&=#,]+")


def secret_parts(url: str) -> list[str]:
    """The pieces of a URL that may be quoted alone in an error (so :func:`redact_text` scrubs them too).

    http(s): user, password, and the path-plus-query as one string (libraries quote ``url: /path?q``).
    Other schemes (apprise): everything after ``://`` and each token in it of 6+ characters, since apprise
    URLs carry tokens in the host and path (``tgram://BOTTOKEN/CHAT``, ``slack://T/B/C``).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    out: list[str] = []
    if parts.scheme.lower() in ("http", "https"):
        with_query = parts.path + (f"?{parts.query}" if parts.query else "")
        out += [p for p in (parts.username, parts.password, with_query) if p and p != "/"]
        return out
    rest = url.split("://", 1)[1] if "://" in url else url
    out.append(rest)
    out += [t for t in _TOKEN_SPLIT.split(rest) if len(t) >= 6]
    out += [p for p in (parts.username, parts.password) if p]
    return out


class RedactingFilter(logging.Filter):
    """Scrubs registered secrets from every record of a logger it is attached to (apprise's own logger logs
    full request URLs, tokens included, at DEBUG: "JSON POST URL: ...", "Socket Exception: ...")."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secrets: list[str]) -> None:
        with self._lock:
            self._secrets.update(s for s in secrets if len(s) >= 4)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = list(self._secrets)
        if not secrets:
            return True
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, None
        record.msg, record.args = redact_text(text, secrets), None
        return True


_APPRISE_FILTER = RedactingFilter()
APPRISE_LOGGERS = ("apprise", "urllib3.connectionpool", "urllib3.poolmanager", "urllib3.util.retry")
_installed = False


def guard_apprise_logs(secrets: list[str]) -> None:
    """Register secrets to scrub from the ``apprise`` logger's records (installs the filter once)."""
    global _installed
    _APPRISE_FILTER.add(secrets)
    if not _installed:
        # a logger's filters see only records logged to that very logger, so name each one: apprise logs to
        # "apprise"; requests (under most apprise plugins) logs request lines through urllib3's loggers
        for name in APPRISE_LOGGERS:
            logging.getLogger(name).addFilter(_APPRISE_FILTER)
        _installed = True
