"""Load gpufleet.yaml into the typed settings, reporting every mistake as ``file:line: key: message``.

The YAML is composed into nodes (SafeLoader only) and walked by hand so each value keeps its line; all
problems are collected and raised together as one :class:`ConfigErrors` before the collector starts.
Secrets come from ``${ENV}`` references or ``file:/path`` and are never echoed in error text.

The package by concern: :mod:`.nodes` walks YAML nodes and converts values (with their lines),
:mod:`.hostlist` sizes and expands host ranges, :mod:`.hosts` holds the defaults/hosts sections and the
cross-host checks, :mod:`.sections` the others; this module puts them together.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from pathlib import Path

import yaml
from gpufleet.collector.addresses import Resolver
from gpufleet.collector.config.hostlist import expand_hostlist
from gpufleet.collector.config.hosts import check_addresses, check_hosts, parse_defaults, parse_hosts
from gpufleet.collector.config.nodes import Bad, ConfigErrors, Parser, parse_duration, section, values_of
from gpufleet.collector.config.sections import (
    ALERTING_SPEC,
    API_SPEC,
    METRICS_SPEC,
    STORAGE_SPEC,
    TOP_KEYS,
    TOP_SPEC,
    parse_collectors,
    parse_listen,
    parse_notifiers,
    parse_rules,
    parse_web,
)
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import (
    AlertingConfig,
    ApiConfig,
    Config,
    HostConfig,
    MetricsConfig,
    StorageConfig,
    default_rules,
)
from gpufleet.collector.shards import parse_shard
from yaml.nodes import Node

__all__ = [
    "ConfigErrors",
    "default_config",
    "expand_hostlist",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_listen",
]


# --------------------------------------------------------------------------------------------- public API

def parse_config(text: str, source: str = "<config>", *, base_dir: str | Path | None = None,
                 env: Mapping[str, str] | None = None, resolve_secrets: bool = True,
                 resolver: Resolver | None = None, with_hosts: bool = True) -> Config:
    """Validate YAML ``text`` into a :class:`Config`; raise :class:`ConfigErrors` listing every mistake.

    ``source`` names the file in errors; relative paths resolve against ``base_dir`` (default: the
    directory of ``source``). ``resolve_secrets=False`` is for clients that only need paths (socket,
    database): unset env refs stay as written, and secret files, key files and known_hosts are not read.
    ``resolver`` looks host names up (``config check``: :func:`.hosts.system_resolver`) to warn about one
    machine listed twice; without one only addresses written alike are compared;
    the warnings, ``file:line: key: warning: ...``, are in ``Config.warnings``. ``with_hosts=False`` leaves
    the host list out (``Config.hosts`` empty, its mistakes unchecked): the CLI's commands read the socket,
    database, thresholds and collectors, and a 5,000-host list would cost each command most of a second.
    """
    base = Path(base_dir) if base_dir is not None else Path(source).expanduser().absolute().parent
    p = Parser(source, base, os.environ if env is None else env, resolve_secrets)
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML does not allow tabs)"
        else:
            problem = _plain_yaml(problem, text, mark)
        raise ConfigErrors([ConfigError(f"YAML syntax error: {problem}", path=source,
                                        line=mark.line + 1 if mark else None)]) from None
    except yaml.YAMLError as exc:
        raise ConfigErrors([ConfigError(f"YAML error: {exc}", path=source)]) from None

    config = Config(rules=default_rules(), source=source)
    if root is None or p.is_null(root):
        return config
    top: dict[str, Node] = {}
    try:
        for name, knode, vnode in p.pairs(root, ""):
            if name in TOP_KEYS:
                top[name] = vnode
            else:
                p.unknown(name, knode, name, TOP_KEYS, "top-level key")
    except Bad:
        pass

    if "max_hosts" in top:
        with contextlib.suppress(Bad):
            config.max_hosts = TOP_SPEC["max_hosts"](p, top["max_hosts"], "max_hosts")
    if with_hosts:
        defaults = parse_defaults(p, top.get("defaults"))
        hosts = parse_hosts(p, top.get("hosts"), defaults, config.max_hosts)
        check_hosts(p, hosts)
        check_addresses(p, hosts, resolver=resolver)
        config.hosts = [h for h, _f in hosts]
    config.storage = StorageConfig(**values_of(section(p, top.get("storage"), "storage", STORAGE_SPEC)))
    config.rules = parse_rules(p, top.get("rules"))
    config.notifiers = parse_notifiers(p, top.get("notifiers"))
    alerting = section(p, top.get("alerting"), "alerting", ALERTING_SPEC)
    config.alerting = AlertingConfig(**values_of(alerting))
    if config.alerting.notify_users:
        where = alerting["notify_users"][1]
        if not config.alerting.user_notifier:
            p.error("notify_users needs user_notifier (an apprise mailto:// URL to send user mail with)",
                    where, "alerting.notify_users")
        if not config.alerting.user_email_domain and not config.alerting.user_emails:
            p.error("notify_users needs user_email_domain or user_emails to find addresses",
                    where, "alerting.notify_users")
    if config.alerting.job_notes and not config.alerting.notify_users:
        p.error("job_notes go through the user notifier: set notify_users (with user_notifier and "
                "user_email_domain or user_emails)", alerting["job_notes"][1], "alerting.job_notes")
    config.api = ApiConfig(**values_of(section(p, top.get("api"), "api", API_SPEC)))
    config.metrics = MetricsConfig(**values_of(section(p, top.get("metrics"), "metrics", METRICS_SPEC)))
    if "shard" in top:
        with contextlib.suppress(Bad):
            try:
                config.shard = parse_shard(p.string(top["shard"], "shard"))
            except ValueError as exc:
                p.error(str(exc), top["shard"], "shard")
    config.web = parse_web(p, top.get("web"))
    config.collectors = parse_collectors(p, top.get("collectors"))
    if "workers" in top:
        with contextlib.suppress(Bad):
            config.workers = _workers(p, top["workers"], config)
    if "max_concurrent_connects" in top:
        with contextlib.suppress(Bad):
            config.max_concurrent_connects = TOP_SPEC["max_concurrent_connects"](
                p, top["max_concurrent_connects"], "max_concurrent_connects")

    if p.errors:
        unique = {(e.line, e.key, e.reason): e for e in p.errors}
        raise ConfigErrors(sorted(unique.values(), key=lambda e: e.line or 0))
    config.warnings = [str(w) for w in sorted(p.warnings, key=lambda e: e.line or 0)]
    return config


#: libyaml's composer when PyYAML was built with it: the same nodes and line marks, 20x faster (a 600-host
#: file: 23 ms instead of 490, paid by every CLI command that reads the config)
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _plain_yaml(problem: str, text: str, mark: yaml.Mark | None) -> str:
    """PyYAML's parser words for a misplaced indent, said as the mistake a person made (issue 36): the line
    and column are the file's; what PyYAML expected stays in brackets for the curious."""
    lines = text.splitlines()
    if mark is None or mark.line >= len(lines):
        return problem
    shown = lines[mark.line].strip()
    if len(shown) > 60:
        shown = shown[:59] + "…"
    where = f"{shown!r} (column {mark.column + 1})"
    if "expected <block end>" in problem or "did not find expected key" in problem:
        return (f"bad indentation: {where} does not line up with the lines above it in its list or mapping; "
                f"YAML nests by indentation ({problem})")
    if "mapping values are not allowed here" in problem:
        return (f"bad indentation or an unquoted ': ': {where} starts a key where none can start; line it up "
                f"with its siblings, or quote a value that contains ': ' ({problem})")
    return problem


def _compose(text: str) -> Node | None:
    """The document's node tree. A file libyaml refuses is composed again by the pure-Python loader, so a
    syntax error reads the same with either (its messages are the ones the hints below know)."""
    if _FAST_LOADER is not None:
        try:
            return yaml.compose(text, Loader=_FAST_LOADER)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _workers(p: Parser, node: Node, config: Config) -> int:
    """``workers: N``: N worker processes on this machine (collector/service/workers.py), with what they
    exclude."""
    n: int = TOP_SPEC["workers"](p, node, "workers")
    if n > 1:
        if config.shard is not None:
            p.error("workers and shard: a collector is either one shard of several machines or split over "
                    "workers on one; set one of them", node, "workers")
        if config.web.enabled:
            p.error("the web page shows one collector: with workers, turn web off (each worker's "
                    "metrics port, the CLI and the alerts cover the whole fleet)", node, "workers")
        if config.collectors:
            p.error("collectors: the CLI finds the workers of this config by itself; drop collectors: "
                    "or workers:", node, "workers")
    return n


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None,
                resolve_secrets: bool = True, resolver: Resolver | None = None,
                with_hosts: bool = True) -> Config:
    """Read and validate a config file; raise :class:`ConfigErrors` (file:line: key: ...) on mistakes.
    The keywords are :func:`parse_config`'s."""
    source = str(path)
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigErrors([ConfigError(f"cannot read config: {exc.strerror or exc}", path=source)]) from None
    except UnicodeDecodeError as exc:
        raise ConfigErrors([ConfigError(f"config is not UTF-8 text: {exc.reason}", path=source)]) from None
    base = Path(path).expanduser().absolute().parent
    return parse_config(text, source, base_dir=base, env=env, resolve_secrets=resolve_secrets,
                        resolver=resolver, with_hosts=with_hosts)


def default_config() -> Config:
    """No config file: watch this machine through the ``local`` transport, all rules at their defaults."""
    name = socket.gethostname() or "localhost"
    local = HostConfig(name=name, address="localhost", transport="local")
    return Config(hosts=[local], rules=default_rules())

