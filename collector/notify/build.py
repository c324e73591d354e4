"""Notifier configs -> notifier objects, with secrets resolved here and only here.

One notifier per URL (named ``name`` or ``name#2`` ...) so a retry re-sends only to the destination that
failed, never duplicates to the ones that succeeded.
"""

from __future__ import annotations

import dataclasses

from gpufleet.collector.errors import ConfigError
from gpufleet.collector.model.classify import UNATTRIBUTED
from gpufleet.collector.notify.alertmanager import AlertmanagerNotifier
from gpufleet.collector.notify.apprise_notifier import AppriseNotifier, UserNotifier
from gpufleet.collector.notify.base import Notifier
from gpufleet.collector.notify.command import CommandNotifier
from gpufleet.collector.notify.webhook import WebhookNotifier
from gpufleet.collector.secrets import resolve_secret
from gpufleet.collector.settings import AlertingConfig, NotifierConfig

USER_NOTIFIER = "users"


def user_email(alerting: AlertingConfig, user: str) -> str | None:
    """The address of a user: ``user_emails``, else ``user@user_email_domain`` for a real user name."""
    if user in alerting.user_emails:
        return alerting.user_emails[user]
    if alerting.user_email_domain and user not in ("unknown", "root", UNATTRIBUTED) \
            and not user.startswith("uid"):
        return f"{user}@{alerting.user_email_domain}"
    return None


def _named(cfg: NotifierConfig, index: int, count: int) -> NotifierConfig:
    if count == 1:
        return cfg
    return dataclasses.replace(cfg, name=f"{cfg.name}#{index + 1}")


def build_notifiers(configs: list[NotifierConfig], alerting: AlertingConfig) -> list[Notifier]:
    """Every configured notifier, plus the user mailer when ``alerting.notify_users`` is on."""
    out: list[Notifier] = []
    seen: set[str] = set()
    for cfg in configs:
        where = f"notifiers.{cfg.name}"
        if cfg.name in seen or cfg.name == USER_NOTIFIER:
            raise ConfigError(f"notifier name {cfg.name!r} is used twice or reserved", key=where)
        seen.add(cfg.name)
        headers = {k: resolve_secret(v, where=f"{where}.headers.{k}") for k, v in cfg.headers.items()}
        cfg = dataclasses.replace(cfg, headers=headers)
        if cfg.kind == "command":
            if not cfg.command:
                raise ConfigError("a command notifier needs 'command' (an argv list)", key=where)
            argv = [resolve_secret(a, where=f"{where}.command[{i}]") for i, a in enumerate(cfg.command)]
            out.append(CommandNotifier(cfg, argv))
            continue
        if not cfg.urls:
            raise ConfigError(f"a {cfg.kind} notifier needs at least one URL in 'urls'", key=where)
        for i, shown in enumerate(cfg.urls):
            url = resolve_secret(shown, where=f"{where}.urls[{i}]")
            one = _named(cfg, i, len(cfg.urls))
            if cfg.kind == "webhook":
                out.append(WebhookNotifier(one, url, shown))
            elif cfg.kind == "alertmanager":
                out.append(AlertmanagerNotifier(one, url, shown))
            elif cfg.kind == "apprise":

                out.append(AppriseNotifier(one, url, shown))
            else:
                raise ConfigError(f"unknown notifier kind {cfg.kind!r}", key=where)
    if alerting.notify_users:
        if not alerting.user_notifier:
            raise ConfigError("notify_users needs user_notifier (an apprise URL such as "
                              "mailtos://smtp.example.org?from=gpufleet@example.org)",
                              key="alerting.user_notifier")

        base = resolve_secret(alerting.user_notifier, where="alerting.user_notifier")
        # it takes only the notes addressed to it (targeted, kind "user"); the engine decides what they cover
        cfg = NotifierConfig(name=USER_NOTIFIER, kind="apprise", urls=[alerting.user_notifier])
        out.append(UserNotifier(cfg, base, alerting.user_notifier))
    return out
