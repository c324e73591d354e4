"""Secrets in notifier settings: read from env vars or files, never written to logs.

The config loader (collector/config.py) already expands ``${VAR}``, ``env:VAR`` and ``file:/path`` in YAML;
this module resolves the whole-value ``env:NAME`` / ``file:/path`` forms again for configs built in code, so
``build_notifiers`` works the same either way. Logs only ever show :func:`redact_url`: the scheme and, for
http(s), the host; never a path, query or user info (tokens live there).
"""

from __future__ import annotations

import os
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
