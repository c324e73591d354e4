"""The sections besides hosts: storage, rules, notifiers, alerting, api, metrics, web (keys and checks)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any
from urllib.parse import urlsplit

from gpufleet.collector.addresses import ADDRESS_HELP, CollectorAddress, parse_address
from gpufleet.collector.config import bounds
from gpufleet.collector.config.hosts import known_hosts
from gpufleet.collector.config.nodes import (
    TAG,
    Bad,
    Conv,
    Parser,
    entry_key,
    has_key,
    join_key,
    opt_path,
    section,
    values_of,
)
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import (
    DEFAULT_RULES,
    DEFAULT_WEB_LISTEN,
    RULE_DURATION_PARAMS,
    SEVERITIES,
    NotifierConfig,
    RuleConfig,
    Selector,
    WebConfig,
    default_rules,
)
from yaml.nodes import MappingNode, Node, ScalarNode

#: The top level's numbers (the other top-level keys are sections, parsed by config/__init__.py).
TOP_SPEC: dict[str, Conv] = dict(bounds.TOP)

STORAGE_SPEC: dict[str, Conv] = {
    "path": lambda p, n, k: "" if p.is_null(n) else p.path(n, k, allow_empty=True),
    **bounds.STORAGE,
}

_NOTIFIER_KINDS = ("apprise", "webhook", "alertmanager", "command")
NOTIFIER_SPEC: dict[str, Conv] = {
    "name": Parser.string,
    "kind": lambda p, n, k: p.choice(n, k, _NOTIFIER_KINDS),
    "url": Parser.secret,
    "urls": Parser.secret_list,
    "command": Parser.argv,
    "headers": lambda p, n, k: p.str_map(n, k, Parser.secret),
    **bounds.NOTIFIER,
    "rules": lambda p, n, k: _rule_names(p, n, k),
    "min_severity": lambda p, n, k: p.choice(n, k, SEVERITIES),
    "send_resolved": Parser.boolean,
}

ALERTING_SPEC: dict[str, Conv] = {
    "group_by": Parser.str_list,
    "group_wait": bounds.ALERTING["group_wait"],
    "group_interval": bounds.ALERTING["group_interval"],
    "repeat_interval": bounds.ALERTING["repeat_interval"],
    "queue_size": bounds.ALERTING["queue_size"],
    "notify_users": Parser.boolean,
    "user_email_domain": Parser.opt_string,
    "user_emails": Parser.str_map,
    "user_notifier": lambda p, n, k: None if p.is_null(n) else p.secret(n, k),
    "retry_backoff": bounds.ALERTING["retry_backoff"],
    "retry_backoff_max": bounds.ALERTING["retry_backoff_max"],
    "notifier_down_after": bounds.ALERTING["notifier_down_after"],
    "job_notes": Parser.boolean,
    "job_notes_min_gpu_hours": bounds.ALERTING["job_notes_min_gpu_hours"],
}

API_SPEC: dict[str, Conv] = {
    "socket": lambda p, n, k: "" if p.is_null(n) else p.path(n, k, allow_empty=True),
    **bounds.API,
    "group": lambda p, n, k: p.opt_string(n, k),
    "admins": Parser.str_list,
}

METRICS_SPEC: dict[str, Conv] = {
    "listen": lambda p, n, k: _listen(p, n, k),
    "dcgm_names": Parser.boolean,
}

WEB_SPEC: dict[str, Conv] = {
    "enabled": Parser.boolean,
    "listen": lambda p, n, k: _listen(p, n, k) or DEFAULT_WEB_LISTEN,
    "token": lambda p, n, k: None if p.is_null(n) else p.secret(n, k),
    "show_commands": Parser.boolean,
    **bounds.WEB,
}

_SELECTOR_SPEC: dict[str, Conv] = {
    "hosts": Parser.str_list,
    "tags": Parser.str_list,
    **bounds.SELECTOR,
    "users": Parser.str_list,
    "exclude_users": Parser.str_list,
}

TOP_KEYS = ("defaults", "hosts", "storage", "rules", "notifiers", "alerting", "api", "metrics", "web",
            "max_concurrent_connects", "max_hosts", "shard", "collectors", "workers")


def _rule_names(p: Parser, node: Node, key: str) -> list[str]:
    names = p.str_list(node, key)
    for i, (name, item) in enumerate(zip(names, p.sequence(node, key), strict=True)):
        if name not in DEFAULT_RULES:
            p.unknown(name, item, f"{key}[{i}]", DEFAULT_RULES, "rule")
    if any(n not in DEFAULT_RULES for n in names):
        raise Bad
    return names


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9835"`` / ``"[::1]:9835"`` -> (host, port); port 0 picks a free one.

    Here, not in the metrics module, so ``config check`` accepts exactly what the metrics server can bind.
    """
    where = "metrics.listen"
    host, sep, port_s = listen.strip().rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{listen!r} is not host:port (e.g. 127.0.0.1:9835; 0.0.0.0:9835 for all "
                          "interfaces)", key=where)
    if host.startswith("["):
        if not host.endswith("]") or len(host) == 2:
            raise ConfigError(f"{listen!r}: unbalanced or empty [ ] around an IPv6 address", key=where)
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"{listen!r}: write IPv6 addresses in brackets, e.g. [::1]:9835", key=where)
    if not port_s.isdigit():
        raise ConfigError(f"{listen!r}: port {port_s!r} is not a number", key=where)
    port = int(port_s)
    if port > 65535:
        raise ConfigError(f"{listen!r}: port {port} out of range", key=where)
    return host, port


def _listen(p: Parser, node: Node, key: str) -> str | None:
    value, _ = p.env_scalar(node, key)
    if value is None or value is False:
        return None
    text = p.string(node, key).strip()
    try:
        port = parse_listen(text)[1]
    except ConfigError:
        port = 0
    if port == 0:  # the raw text in the message: an expanded ${VAR} may be a secret
        p.fail(f"expected host:port like 127.0.0.1:9835, got '{p.raw(node)}'", node, key)
    return text


def parse_web(p: Parser, node: Node | None) -> WebConfig:
    """The ``web:`` section; serving beyond loopback with no token is allowed but warned about."""
    got = section(p, node, "web", WEB_SPEC)
    web = WebConfig(**values_of(got))
    if web.enabled and not web.token and "listen" in got:
        host = parse_listen(web.listen)[0]
        if host not in ("127.0.0.1", "::1", "localhost"):
            p.warn(f"the web page listens on {host} with no token: anyone who can reach it reads the fleet "
                   "(set web.token, or put it behind a reverse proxy with auth)", got["listen"][1],
                   "web.listen")
    return web


def parse_rules(p: Parser, node: Node | None) -> dict[str, RuleConfig]:
    rules = default_rules()
    if node is None or p.is_null(node):
        return rules
    try:
        pairs = p.pairs(node, "rules")
    except Bad:
        return rules
    for name, knode, vnode in pairs:
        key = f"rules.{name}"
        if name not in DEFAULT_RULES:
            p.unknown(name, knode, key, DEFAULT_RULES, "rule")
            continue
        try:
            rules[name] = _parse_rule(p, name, vnode, key)
        except Bad:
            pass
    return rules


def _parse_rule(p: Parser, name: str, node: Node, key: str) -> RuleConfig:
    rule = RuleConfig(name=name, params=dict(DEFAULT_RULES[name]))
    if p.is_null(node):
        return rule
    if isinstance(node, ScalarNode) and node.tag == TAG + "bool":
        rule.enabled = p.boolean(node, key)
        return rule
    got = p.fields(node, key, RULE_SPECS[name], f"rule {name}")
    select = Selector()
    for field_name, (value, _vnode) in got.items():
        if field_name == "enabled":
            rule.enabled = value
        elif field_name in _SELECTOR_SPEC:
            setattr(select, field_name, value)
        else:
            rule.params[field_name] = value
    rule.select = select
    return rule


def _param_conv(param: str, default: Any) -> Conv:
    """Converter for a rule parameter: numbers and durations by their bound (bounds.RULE_PARAMS, which must
    name every one), the rest by the default's type."""
    if param == "severity":
        return lambda p, n, k: p.choice(n, k, SEVERITIES)
    if isinstance(default, bool):
        return Parser.boolean
    if param in RULE_DURATION_PARAMS or isinstance(default, (int, float)) or (
            isinstance(default, list) and default and isinstance(default[0], int)):
        return bounds.RULE_PARAMS[param]  # a KeyError at import: a new numeric parameter without a range
    if isinstance(default, list):
        return Parser.str_list
    return lambda p, n, k: p.string(n, k)


def _rule_spec(name: str) -> dict[str, Conv]:
    spec: dict[str, Conv] = {"enabled": Parser.boolean, **_SELECTOR_SPEC}
    for param, default in DEFAULT_RULES[name].items():
        spec[param] = _param_conv(param, default)
    return spec


#: Each rule's keys: enabled, the selectors, and its parameters (built once).
RULE_SPECS: dict[str, dict[str, Conv]] = {name: _rule_spec(name) for name in DEFAULT_RULES}


def parse_notifiers(p: Parser, node: Node | None) -> list[NotifierConfig]:
    if node is None:
        return []
    try:
        items = p.sequence(node, "notifiers")
    except Bad:
        return []
    out: list[NotifierConfig] = []
    lines: dict[str, int | None] = {}
    for index, item in enumerate(items):
        key = entry_key("notifiers", item, index)
        try:
            got = p.fields(item, key, NOTIFIER_SPEC, "a notifier")
        except Bad:
            continue
        if "kind" not in got:
            if not any(isinstance(k, ScalarNode) and k.value == "kind" for k, _ in item.value):
                p.error(f"a notifier needs a kind ({', '.join(_NOTIFIER_KINDS)})", item, key)
            continue
        kind = got["kind"][0]
        name = got["name"][0] if "name" in got else kind
        if name in lines:
            p.error(f"duplicate notifier name '{name}' (first at line {lines[name]}); give each a name",
                    got.get("name", got["kind"])[1], join_key(key, "name"))
        lines.setdefault(name, p.line_of(item))
        urls = ([got["url"][0]] if "url" in got else []) + (got["urls"][0] if "urls" in got else [])
        url_node = got.get("url", got.get("urls", (None, item)))[1]
        if kind == "command":
            if "command" not in got or not got["command"][0]:
                p.error("a command notifier needs command (a string or a list)", item, key)
            if urls:
                p.error("a command notifier takes command, not url/urls", url_node, join_key(key, "url"))
        else:
            if not urls:
                if "url" not in got and "urls" not in got and not has_key(item, ("url", "urls")):
                    p.error(f"a {kind} notifier needs url or urls", item, key)
            if "command" in got:
                p.error(f"command applies to command notifiers only, not {kind}", got["command"][1],
                        join_key(key, "command"))
            if kind in ("webhook", "alertmanager") and p.resolve_secrets:
                for u in urls:
                    if urlsplit(u).scheme not in ("http", "https") or not urlsplit(u).netloc:
                        p.error(f"a {kind} url must be http:// or https://", url_node, join_key(key, "url"))
                        break
        if "headers" in got and kind not in ("webhook", "alertmanager"):
            p.error("headers apply to webhook and alertmanager notifiers only", got["headers"][1],
                    join_key(key, "headers"))
        values = {k: v for k, (v, _n) in got.items() if k not in ("name", "kind", "url", "urls")}
        out.append(NotifierConfig(name=name, kind=kind, urls=urls, **values))
    return out




COLLECTOR_SPEC: dict[str, Conv] = {
    "address": Parser.string,
    "key": opt_path,
    "known_hosts": known_hosts,
}


def parse_collectors(p: Parser, node: Node | None) -> list[CollectorAddress]:
    """``collectors:``, the collectors the CLI asks when no ``--collector`` is given: each a socket path or
    ``[user@]host[:port][/socket]``, or a mapping ``{address: ..., key: ..., known_hosts: ...}`` (SSH key
    and known_hosts as for hosts; relative paths from this file's directory)."""
    if node is None:
        return []
    out: list[CollectorAddress] = []
    try:
        items = p.sequence(node, "collectors")
    except Bad:
        return []
    for i, item in enumerate(items):
        key = f"collectors[{i}]"
        try:
            fields: dict[str, tuple[Any, Node]] = (
                p.fields(item, key, COLLECTOR_SPEC, key) if isinstance(item, MappingNode)
                else {"address": (p.string(item, key), item)})
            if "address" not in fields:
                if isinstance(item, MappingNode) and not has_key(item, ("address",)):
                    p.error(f"needs an address ({ADDRESS_HELP})", item, key)
                continue
            text, where = fields["address"]
            try:
                addr = parse_address(text)
            except ValueError as exc:
                p.error(str(exc), where, f"{key}.address" if isinstance(item, MappingNode) else key)
                continue
            if addr.host is None:  # a socket on this machine: relative to this file, like every path here
                addr = dataclasses.replace(addr, socket=p.resolve_path(addr.socket))
            elif "key" in fields or "known_hosts" in fields:
                addr = dataclasses.replace(addr, key=fields.get("key", (None, item))[0],
                                           known_hosts=fields.get("known_hosts", (None, item))[0])
            if addr.host is None and ("key" in fields or "known_hosts" in fields):
                p.error("key and known_hosts are for a collector reached over SSH, not a local socket",
                        item, key)
                continue
            for name, path in (("key", addr.key), ("known_hosts", addr.known_hosts)):
                if path is not None and p.resolve_secrets and not os.path.isfile(path):
                    p.error(f"{name} file not found: {path}", fields[name][1], f"{key}.{name}")
            out.append(addr)
        except Bad:
            pass
    return out
