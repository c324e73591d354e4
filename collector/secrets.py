"""Secrets: where they are read (``env:NAME``, ``file:/path``) and how they are kept out of logs and errors.

One module for the config loader and the notifiers: :func:`read_secret` is the only reader of secret
references, :func:`redact_url` (scheme and host only) is what logs show of a notifier URL,
:func:`mask_url` keeps a URL's shape for an operator, and :func:`redact_text` / :class:`RedactingFilter`
scrub known values out of error text and third-party log records.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from gpufleet.collector.errors import ConfigError

STARS = "***"


class SecretError(ValueError):
    """A secret reference that cannot be read; ``str()`` names the variable or file, never a value."""


def is_reference(value: str) -> bool:
    """``env:NAME`` or ``file:/path``: a value to be read, not the secret itself."""
    return value.startswith(("env:", "file:"))


def read_secret(value: str, *, env: Mapping[str, str] | None = None,
                base_dir: str | Path | None = None) -> str:
    """The secret ``value`` refers to: ``env:NAME`` is the variable's value, ``file:/path`` (or
    ``file:///path``; relative to ``base_dir``) the file's first line; anything else is itself.

    An unset or empty variable and an empty or unreadable file raise :class:`SecretError`.
    """
    environ = os.environ if env is None else env
    if value.startswith("env:"):
        name = value[len("env:"):].strip()
        if not environ.get(name):
            raise SecretError(f"environment variable {name} is not set")
        return environ[name]
    if not value.startswith("file:"):
        return value
    ref = value[len("file:"):]
    ref = (ref[2:] if ref.startswith("//") else ref).strip()
    p = Path(ref).expanduser()
    path = os.path.normpath(p if p.is_absolute() or base_dir is None else Path(base_dir) / p)
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise SecretError(f"cannot read secret file {path}: {why}") from None
    if not first:
        raise SecretError(f"secret file {path} is empty")
    return first


def resolve_secret(value: str, *, where: str) -> str:
    """:func:`read_secret` for configs built in code (notifiers); ``where`` (e.g.
    ``notifiers.slack.urls[0]``) goes into the :class:`ConfigError`."""
    try:
        return read_secret(value)
    except SecretError as exc:
        raise ConfigError(str(exc), key=where) from None


def redact_url(url: str) -> str:
    """Safe to log: ``https://hooks.slack.com/***``, ``slack://***``, ``env:SLACK_URL`` (names only)."""
    if url.startswith(("env:", "file:")):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return STARS
    if not parts.scheme or "://" not in url:
        return STARS
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


_SECRET_QUERY = re.compile(r"token|secret|passw|pwd|pass$|key|sig|auth|code|credential|session", re.I)
_GENERIC_SCHEMES = {"http", "https", "json", "jsons", "xml", "xmls", "form", "forms", "mailto", "mailtos",
                    "ntfy", "ntfys", "mqtt", "mqtts", "file"}
_TOKENISH = re.compile(r"(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-]{20,}")
_WEBHOOK_HOSTS = ("hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com",
                  "outlook.office.com", "api.telegram.org", "maker.ifttt.com")


def mask_url(url: str) -> str:
    """``url`` with its shape kept (for an operator reading it): userinfo passwords, secret-looking query
    values and token-like path parts become ``***``.

    Webhook hosts that carry the secret in the path (Slack, Discord, Teams, ...) and apprise token schemes
    (``slack://``, ``tgram://``, ...) lose their whole path.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return STARS
    if not parts.scheme or "://" not in url:
        return STARS if url else url
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        user, colon, _pw = userinfo.partition(":")
        userinfo = f"{user}:{STARS}" if colon else user
    scheme = parts.scheme.lower()
    host = hostport.split(":")[0].lower()
    generic = scheme in _GENERIC_SCHEMES
    if not generic and "." not in host:
        hostport = STARS  # apprise token schemes: the "host" is itself a token
    elif not generic and ":" in hostport and not hostport.rsplit(":", 1)[1].isdigit():
        hostport = hostport.split(":")[0] + ":" + STARS
    segments = parts.path.split("/")
    whole_path = not generic or any(host == h or host.endswith("." + h) for h in _WEBHOOK_HOSTS)
    segments = [s if not s or (not whole_path and not _TOKENISH.fullmatch(s)) else STARS for s in segments]
    query = "&".join(
        f"{quote(k, safe='')}={STARS if _SECRET_QUERY.search(k) else quote(v, safe='')}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    netloc = f"{userinfo}@{hostport}" if at else hostport
    return urlunsplit((parts.scheme, netloc, "/".join(segments), query, STARS if parts.fragment else ""))


def redact_text(text: str, secrets: list[str]) -> str:
    """Scrub known secret values out of an error message before it is logged."""
    for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, STARS)
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
