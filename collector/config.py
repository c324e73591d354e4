"""Load gpufleet.yaml into the typed settings, reporting every mistake as ``file:line: key: message``.

The YAML is composed into nodes (SafeLoader only) and walked by hand so each value keeps its line; all
problems are collected and raised together as one :class:`ConfigErrors` before the collector starts.
Secrets come from ``${ENV}`` references or ``file:/path`` and are never echoed in error text.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import math
import os
import re
import shlex
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import yaml
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import (
    DEFAULT_RULES,
    RULE_DURATION_PARAMS,
    SEVERITIES,
    AlertingConfig,
    ApiConfig,
    Config,
    HostConfig,
    MetricsConfig,
    NotifierConfig,
    RuleConfig,
    Selector,
    StorageConfig,
    default_rules,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "ConfigErrors",
    "default_config",
    "expand_hostlist",
    "find_config",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_listen",
    "redact",
]


class ConfigErrors(ConfigError):
    """Every mistake in one config. ``errors`` lists them in file order; ``str()`` shows one per line.

    ``path``/``line``/``key``/``reason`` are those of the first error, so it reads like a plain ConfigError.
    """

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        self.errors: list[ConfigError] = list(errors)
        if not self.errors:
            raise ValueError("ConfigErrors needs at least one error")
        first = self.errors[0]
        super().__init__(first.reason, path=first.path, line=first.line, key=first.key)
        self.args = ("\n".join(str(e) for e in self.errors),)


# --------------------------------------------------------------------------------------------- durations

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_DURATION_FULL = re.compile(r"(?:(?:\d+(?:\.\d+)?|\.\d+)\s*(?:ms|s|m|h|d|w)\s*)+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d|w)")
DURATION_HELP = "use seconds or a duration like 90s, 30m, 2h, 1d, 1h30m"


def parse_duration(value: object, *, key: str | None = None, path: str | None = None,
                   line: int | None = None) -> float:
    """Seconds from a number or ``90s``/``30m``/``2h``/``1d``/``1h30m``/``500ms``; never negative.

    Raises :class:`ConfigError` (with the given ``key``/``path``/``line``) on anything else.
    """
    def bad(message: str) -> NoReturn:
        raise ConfigError(message, path=path, line=line, key=key)

    if isinstance(value, bool) or value is None:
        bad(f"expected a duration, got {_py_kind(value)}; {DURATION_HELP}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            bad(f"duration {value!r} must not be negative")
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        elif _DURATION_FULL.fullmatch(text):
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))
        else:
            bad(f"bad duration {value!r}; {DURATION_HELP}")
    else:
        bad(f"expected a duration, got {_py_kind(value)}; {DURATION_HELP}")
    if not math.isfinite(seconds):
        bad(f"duration {value!r} must be finite")
    if seconds < 0:
        bad(f"duration {value!r} must not be negative")
    return seconds


def _py_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------------------------- host ranges

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE_BODY = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
MAX_HOSTS_PER_PATTERN = 10000


def expand_hostlist(pattern: str) -> list[str]:
    """``node[01-03]`` -> node01, node02, node03; ``r[1-2]n[1,3]`` -> the product. Raises ValueError."""
    pieces: list[list[str]] = []
    pos = 0
    for m in _BRACKET.finditer(pattern):
        body = m.group(1).replace(" ", "")
        if not _RANGE_BODY.fullmatch(body):
            raise ValueError(f"bad host range '[{m.group(1)}]': use e.g. node[01-16] or node[1,3,5-7]")
        pieces.append([pattern[pos:m.start()]])
        pieces.append(_expand_range_body(body))
        pos = m.end()
    if "[" in pattern[pos:] or "]" in pattern[pos:]:
        raise ValueError("unbalanced '[' or ']' in host pattern")
    pieces.append([pattern[pos:]])
    total = 1
    for p in pieces:
        total *= len(p)
    if total > MAX_HOSTS_PER_PATTERN:
        raise ValueError(f"host range expands to {total} hosts (more than {MAX_HOSTS_PER_PATTERN})")
    return ["".join(parts) for parts in itertools.product(*pieces)]


def _expand_range_body(body: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo_s, _, hi_s = item.partition("-")
        hi_s = hi_s or lo_s
        lo, hi = int(lo_s), int(hi_s)
        if lo > hi:
            raise ValueError(f"bad host range '{item}': start is after end")
        if hi - lo >= MAX_HOSTS_PER_PATTERN:
            raise ValueError(f"host range '{item}' is larger than {MAX_HOSTS_PER_PATTERN}")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


# --------------------------------------------------------------------------------------------- redaction

_SECRET_QUERY = re.compile(r"token|secret|passw|pwd|pass$|key|sig|auth|code|credential|session", re.I)
_GENERIC_SCHEMES = {"http", "https", "json", "jsons", "xml", "xmls", "form", "forms", "mailto", "mailtos",
                    "ntfy", "ntfys", "mqtt", "mqtts", "file"}
_TOKENISH = re.compile(r"(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-]{20,}")
_WEBHOOK_HOSTS = ("hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com",
                  "outlook.office.com", "api.telegram.org", "maker.ifttt.com")
STARS = "***"


def redact(url: str) -> str:
    """``url`` safe for logs: hides userinfo passwords, secret-looking query values and token path parts.

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


# --------------------------------------------------------------------------------------------- parser core

class _Bad(Exception):
    """A value was wrong; its error is already recorded."""


Conv = Callable[["_Parser", Node, str], Any]
_T = TypeVar("_T")

_TAG = "tag:yaml.org,2002:"
_ENV_REF = re.compile(r"\$(\$)?\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_DISABLE_WORDS = {"none", "no", "off", "false", "0", "disable", "disabled", "ignore", "insecure", "skip",
                  "never", "accept-all", "accept_all", "any", "autoadd", "auto-add", "/dev/null", "nul"}
_POLICIES = ("strict", "accept-new")
_HOST_NAME = re.compile(r"[\w.:%-]+")
_SHORTHAND = re.compile(
    r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[(?P<v6>[0-9A-Fa-f:.%\w]*:[0-9A-Fa-f:.%\w]*)\]|[^:@\s]+)"
    r"(?::(?P<port>\d+))?"
)
_VERIFY_WHY = ("gpufleet always verifies SSH host keys: an impostor host could feed it false data and "
               "receive the agent command")


class _Parser:
    """Walks composed YAML nodes, converting values and recording errors with their lines."""

    def __init__(self, source: str, base_dir: Path, env: Mapping[str, str], resolve_secrets: bool) -> None:
        self.source, self.base_dir, self.env = source, base_dir, env
        self.resolve_secrets = resolve_secrets
        self.errors: list[ConfigError] = []
        self._constructor = yaml.constructor.SafeConstructor()

    # ---- errors

    def line_of(self, node: Node | None) -> int | None:
        return node.start_mark.line + 1 if node is not None else None

    def error(self, message: str, node: Node | None, key: str | None) -> None:
        self.errors.append(ConfigError(message, path=self.source, line=self.line_of(node), key=key))

    def fail(self, message: str, node: Node | None, key: str | None) -> NoReturn:
        self.error(message, node, key)
        raise _Bad

    def unknown(self, name: str, node: Node, key: str, valid: Iterable[str], what: str,
                where: str = "") -> None:
        place = f" in {where}" if where else ""
        self.error(f"unknown {what} '{name}'{place}; {_suggest(name, valid)}", node, key)

    # ---- node basics

    @staticmethod
    def kind(node: Node) -> str:
        if isinstance(node, MappingNode):
            return "a mapping"
        if isinstance(node, SequenceNode):
            return "a list"
        return {"null": "null", "bool": "a boolean", "int": "an integer", "float": "a number",
                "str": "a string", "timestamp": "a date"}.get(node.tag.removeprefix(_TAG), "a value")

    @staticmethod
    def raw(node: Node) -> str:
        """The value as written in the file (``${VAR}`` unexpanded), safe to show in errors."""
        return str(node.value) if isinstance(node, ScalarNode) else "..."

    @staticmethod
    def is_null(node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == _TAG + "null"

    def scalar(self, node: Node, key: str) -> Any:
        if not isinstance(node, ScalarNode):
            return node
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.fail(f"bad value: {getattr(exc, 'problem', None) or exc}", node, key)

    def expand(self, text: str, node: Node, key: str) -> str:
        """``${VAR}`` / ``${VAR:-default}`` from the environment; ``$${`` is a literal ``${``."""
        missing: list[str] = []

        def sub(m: re.Match[str]) -> str:
            if m.group(1):
                return m.group(0)[1:]
            name, default = m.group(2), m.group(3)
            value = self.env.get(name)
            if value:
                return value
            if default is not None:
                return default
            if value is not None:
                return ""
            missing.append(name)
            return m.group(0)  # only kept when not resolving secrets

        out = _ENV_REF.sub(sub, text)
        if missing and self.resolve_secrets:
            names = ", ".join(dict.fromkeys(missing))
            self.fail(f"environment variable {names} is not set", node, key)
        return out

    def env_scalar(self, node: Node, key: str) -> tuple[Any, bool]:
        """The scalar's value, with ``${VAR}`` expanded in strings; second item: it came from the env."""
        value = self.scalar(node, key)
        if isinstance(value, str) and "${" in value:
            return self.expand(value, node, key), True
        return value, False

    def pairs(self, node: Node, key: str, _seen: set[int] | None = None) -> list[tuple[str, Node, Node]]:
        """A mapping's (key, key node, value node) with merge keys applied and duplicates reported."""
        if not isinstance(node, MappingNode):
            self.fail(f"expected a mapping, got {self.kind(node)}", node, key)
        seen = _seen if _seen is not None else set()
        seen.add(id(node))
        explicit: dict[str, tuple[str, Node, Node]] = {}
        merged: list[tuple[str, Node, Node]] = []
        for knode, vnode in node.value:
            if knode.tag == _TAG + "merge":
                sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for src in sources:
                    if id(src) in seen:
                        self.error("recursive merge", knode, key)
                        continue
                    try:
                        merged.extend(self.pairs(src, key, seen))
                    except _Bad:
                        pass
                continue
            name = self.scalar(knode, key) if isinstance(knode, ScalarNode) else None
            if not isinstance(name, str):
                self.error(f"keys must be strings, got {self.kind(knode)}", knode, key)
                continue
            if name in explicit:
                first = self.line_of(explicit[name][1])
                self.error(f"duplicate key '{name}' (first at line {first})", knode, _join(key, name))
                continue
            explicit[name] = (name, knode, vnode)
        out = list(explicit.values())
        for item in merged:
            if item[0] not in explicit:
                explicit[item[0]] = item
                out.append(item)
        return out

    def fields(self, node: Node, key: str, spec: Mapping[str, Conv],
               what: str) -> dict[str, tuple[Any, Node]]:
        """Convert a mapping by ``spec``: unknown keys and bad values are recorded, the rest returned."""
        out: dict[str, tuple[Any, Node]] = {}
        for name, knode, vnode in self.pairs(node, key):
            sub = _join(key, name)
            conv = spec.get(name)
            if conv is None:
                self.unknown(name, knode, sub, spec, "key", what)
                continue
            try:
                out[name] = (conv(self, vnode, sub), vnode)
            except _Bad:
                pass
        return out

    def sequence(self, node: Node, key: str) -> list[Node]:
        if self.is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            self.fail(f"expected a list, got {self.kind(node)}", node, key)
        return list(node.value)

    # ---- typed values

    def string(self, node: Node, key: str, *, allow_empty: bool = False) -> str:
        value, _ = self.env_scalar(node, key)
        if not isinstance(value, str):
            self.fail(f"expected a string, got {self.kind(node)}", node, key)
        if not allow_empty and not value.strip():
            self.fail("must not be empty", node, key)
        return value

    def opt_string(self, node: Node, key: str) -> str | None:
        return None if self.is_null(node) else self.string(node, key)

    def integer(self, node: Node, key: str, *, lo: int | None = None, hi: int | None = None) -> int:
        value, from_env = self.env_scalar(node, key)
        if from_env:
            try:
                value = int(str(value).strip(), 10)
            except ValueError:
                self.fail("expected an integer (the environment variable's value is not one)", node, key)
        if isinstance(value, str) and value.strip().isdigit():
            self.fail(f"expected an integer, got a string '{value}'; write it without quotes: "
                      f"{value.strip()}", node, key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"expected an integer, got {self.kind(node)}", node, key)
        shown = "" if from_env else f", got {value}"
        if lo is not None and value < lo:
            self.fail(f"must be at least {lo}{shown}", node, key)
        if hi is not None and value > hi:
            self.fail(f"must be at most {hi}{shown}", node, key)
        return value

    def number(self, node: Node, key: str, *, lo: float | None = None, hi: float | None = None) -> float:
        value, from_env = self.env_scalar(node, key)
        if from_env:
            try:
                value = float(str(value).strip())
            except ValueError:
                self.fail("expected a number (the environment variable's value is not one)", node, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"expected a number, got {self.kind(node)}", node, key)
        shown = "" if from_env else f", got {value}"
        if lo is not None and value < lo:
            self.fail(f"must be at least {lo}{shown}", node, key)
        if hi is not None and value > hi:
            self.fail(f"must be at most {hi}{shown}", node, key)
        return float(value)

    def duration(self, node: Node, key: str, *, positive: bool = False) -> float:
        value, from_env = self.env_scalar(node, key)
        if not isinstance(node, ScalarNode):
            self.fail(f"expected a duration, got {self.kind(node)}; {DURATION_HELP}", node, key)
        try:
            seconds = parse_duration(value)
        except ConfigError as exc:
            self.fail(f"bad duration from the environment; {DURATION_HELP}" if from_env else exc.reason,
                      node, key)
        if positive and seconds <= 0:
            self.fail("must be greater than 0", node, key)
        return seconds

    def opt_duration(self, node: Node, key: str, *, positive: bool = False) -> float | None:
        return None if self.is_null(node) else self.duration(node, key, positive=positive)

    def boolean(self, node: Node, key: str) -> bool:
        value, from_env = self.env_scalar(node, key)
        if from_env and isinstance(value, str):
            word = value.strip().lower()
            if word in ("true", "yes", "on", "1"):
                return True
            if word in ("false", "no", "off", "0"):
                return False
        if not isinstance(value, bool):
            self.fail(f"expected true or false, got {self.kind(node)}", node, key)
        return value

    def choice(self, node: Node, key: str, options: Iterable[str]) -> str:
        opts = list(options)
        value = self.string(node, key, allow_empty=True)
        if value not in opts:
            raw = self.raw(node)
            self.fail(f"must be one of {', '.join(opts)}, got '{raw}'{_did_you_mean(raw, opts)}", node, key)
        return value

    def each(self, node: Node, key: str, conv: Callable[[Node, str], _T]) -> list[_T]:
        """Each item of a sequence through ``conv``; every bad item is reported before the list fails."""
        items = self.sequence(node, key)
        out: list[_T] = []
        bad = False
        for i, item in enumerate(items):
            try:
                out.append(conv(item, f"{key}[{i}]"))
            except _Bad:
                bad = True
        if bad:
            raise _Bad
        return out

    def str_list(self, node: Node, key: str) -> list[str]:
        return self.each(node, key, self.string)

    def int_list(self, node: Node, key: str, *, lo: int | None = None) -> list[int]:
        return self.each(node, key, lambda n, k: self.integer(n, k, lo=lo))

    def argv(self, node: Node, key: str, *, allow_empty: bool = True) -> list[str]:
        """A command line: a string (split like a shell would, without running one) or a list."""
        if isinstance(node, ScalarNode) and not self.is_null(node):
            text = self.string(node, key, allow_empty=allow_empty)
            try:
                out = shlex.split(text)
            except ValueError as exc:
                self.fail(f"cannot split command line: {exc}", node, key)
        else:
            out = self.str_list(node, key)
        if not out and not allow_empty:
            self.fail("must not be empty", node, key)
        return out

    def str_map(self, node: Node, key: str, value: Conv | None = None) -> dict[str, str]:
        if self.is_null(node):
            return {}
        conv: Conv = value or (lambda p, n, k: p.string(n, k, allow_empty=True))
        out: dict[str, str] = {}
        bad = False
        for name, _knode, vnode in self.pairs(node, key):
            try:
                out[name] = conv(self, vnode, _join(key, name))
            except _Bad:
                bad = True
        if bad:
            raise _Bad
        return out

    def path(self, node: Node, key: str, *, allow_empty: bool = False) -> str:
        """A file path: ``~`` expanded, relative paths taken from the config file's directory."""
        text = self.string(node, key, allow_empty=allow_empty).strip()
        return self.resolve_path(text) if text else ""

    def resolve_path(self, text: str) -> str:
        p = Path(text).expanduser()
        return os.path.normpath(p if p.is_absolute() else self.base_dir / p)

    def secret(self, node: Node, key: str) -> str:
        """A string that may be a secret: ``${VAR}`` expanded; ``env:VAR`` is the variable's value and
        ``file:/path`` the file's first line."""
        value = self.string(node, key)
        if not self.resolve_secrets or not value.startswith(("file:", "env:")):
            return value
        if value.startswith("env:"):
            name = value[len("env:"):].strip()
            if not self.env.get(name):
                self.fail(f"environment variable {name} is not set", node, key)
            return self.env[name]
        ref = value[len("file:"):]
        ref = ref[2:] if ref.startswith("//") else ref
        path = self.resolve_path(ref.strip())
        try:
            with open(path, encoding="utf-8") as f:
                first = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            self.fail(f"cannot read secret file {path}: {getattr(exc, 'strerror', None) or exc}", node, key)
        if not first:
            self.fail(f"secret file {path} is empty", node, key)
        return first

    def secret_list(self, node: Node, key: str) -> list[str]:
        return self.each(node, key, self.secret)

    # ---- host key verification

    def known_hosts(self, node: Node, key: str) -> str:
        raw = self.raw(node)
        value, _ = self.env_scalar(node, key)
        if value is None or value is False or (isinstance(value, str) and (
                not value.strip() or value.strip().lower() in _DISABLE_WORDS)):
            shown = "null" if value is None else f"'{raw}'"
            self.fail(f"known_hosts: {shown} would disable host key verification; {_VERIFY_WHY}. "
                      "Leave it out for ~/.ssh/known_hosts, or give a file (with host_key_policy: "
                      "accept-new to learn keys on first connect)", node, key)
        return self.path(node, key)

    def host_key_policy(self, node: Node, key: str) -> str:
        value, _ = self.env_scalar(node, key)
        raw = self.raw(node)
        if value is None or isinstance(value, bool) or (
                isinstance(value, str) and value.strip().lower() in _DISABLE_WORDS):
            self.fail(f"'{raw}' would disable host key verification; {_VERIFY_WHY}. Use 'strict' (keys "
                      "must be in known_hosts) or 'accept-new' (learn a key on first connect, then pin it)",
                      node, key)
        return self.choice(node, key, _POLICIES)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _did_you_mean(name: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _suggest(name: str, valid: Iterable[str]) -> str:
    opts = list(valid)
    close = difflib.get_close_matches(name, opts, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else ""
    if not close or len(opts) <= 16:  # every rule name (13) is still listed
        hint = (hint + " " if hint else "") + "valid: " + ", ".join(opts)
    return hint


# --------------------------------------------------------------------------------------------- sections

def _port(p: _Parser, n: Node, k: str) -> int:
    return p.integer(n, k, lo=1, hi=65535)


def _positive(p: _Parser, n: Node, k: str) -> float:
    return p.duration(n, k, positive=True)


def _nonneg(p: _Parser, n: Node, k: str) -> float:
    return p.duration(n, k)


def _opt_path(p: _Parser, n: Node, k: str) -> str | None:
    return None if p.is_null(n) else p.path(n, k)


_HOST_SPEC: dict[str, Conv] = {
    "user": _Parser.opt_string,
    "port": _port,
    "key": _opt_path,
    "jump": _Parser.opt_string,
    "known_hosts": _Parser.known_hosts,
    "host_key_policy": _Parser.host_key_policy,
    "agent": lambda p, n, k: p.choice(n, k, ("installed", "upload")),
    "agent_command": _Parser.string,
    "agent_args": _Parser.argv,
    "interval": _positive,
    "connect_timeout": _positive,
    "keepalive_interval": _positive,
    "keepalive_count_max": lambda p, n, k: p.integer(n, k, lo=1, hi=1000),
    "read_timeout": lambda p, n, k: p.opt_duration(n, k, positive=True),
    "tags": _Parser.str_list,
    "python": _Parser.string,
    "upload_dir": _Parser.string,
    "max_line_bytes": lambda p, n, k: p.integer(n, k, lo=1024, hi=1 << 30),
    "transport": lambda p, n, k: p.choice(n, k, ("ssh", "local")),
}
_HOST_ENTRY_SPEC: dict[str, Conv] = {
    "name": lambda p, n, k: _host_name(p, n, k),
    "address": _Parser.string,
    **_HOST_SPEC,
}

_STORAGE_SPEC: dict[str, Conv] = {
    "path": lambda p, n, k: "" if p.is_null(n) else p.path(n, k, allow_empty=True),
    "raw_retention": _positive,
    "minute_retention": _positive,
    "hour_retention": _positive,
    "batch_max_rows": lambda p, n, k: p.integer(n, k, lo=1),
    "batch_max_delay": _nonneg,
}

_NOTIFIER_KINDS = ("apprise", "webhook", "alertmanager", "command")
_NOTIFIER_SPEC: dict[str, Conv] = {
    "name": _Parser.string,
    "kind": lambda p, n, k: p.choice(n, k, _NOTIFIER_KINDS),
    "url": _Parser.secret,
    "urls": _Parser.secret_list,
    "command": _Parser.argv,
    "headers": lambda p, n, k: p.str_map(n, k, _Parser.secret),
    "timeout": _positive,
    "retries": lambda p, n, k: p.integer(n, k, lo=0, hi=100),
    "rules": lambda p, n, k: _rule_names(p, n, k),
    "min_severity": lambda p, n, k: p.choice(n, k, SEVERITIES),
    "send_resolved": _Parser.boolean,
}

_ALERTING_SPEC: dict[str, Conv] = {
    "group_by": _Parser.str_list,
    "group_wait": _nonneg,
    "group_interval": _positive,
    "repeat_interval": _positive,
    "queue_size": lambda p, n, k: p.integer(n, k, lo=1),
    "notify_users": _Parser.boolean,
    "user_email_domain": _Parser.opt_string,
    "user_emails": _Parser.str_map,
    "user_notifier": lambda p, n, k: None if p.is_null(n) else p.secret(n, k),
    "retry_backoff": _positive,
    "retry_backoff_max": _positive,
    "notifier_down_after": _positive,
}

_API_SPEC: dict[str, Conv] = {
    "socket": lambda p, n, k: "" if p.is_null(n) else p.path(n, k, allow_empty=True),
    "mode": lambda p, n, k: _socket_mode(p, n, k),
    "group": lambda p, n, k: p.opt_string(n, k),
    "admins": _Parser.str_list,
}

_METRICS_SPEC: dict[str, Conv] = {
    "listen": lambda p, n, k: _listen(p, n, k),
}

_SELECTOR_SPEC: dict[str, Conv] = {
    "hosts": _Parser.str_list,
    "tags": _Parser.str_list,
    "gpus": lambda p, n, k: p.int_list(n, k, lo=0),
    "users": _Parser.str_list,
    "exclude_users": _Parser.str_list,
}

_TOP_KEYS = ("defaults", "hosts", "storage", "rules", "notifiers", "alerting", "api", "metrics",
             "max_concurrent_connects")


def _host_name(p: _Parser, node: Node, key: str) -> str:
    name = p.string(node, key).strip()
    if not _HOST_NAME.fullmatch(_BRACKET.sub("0", name)):
        p.fail(f"host name '{p.raw(node)}' may only contain letters, digits, '.', '-', '_', ':' "
               "(and a range like node[01-16])", node, key)
    return name


def _rule_names(p: _Parser, node: Node, key: str) -> list[str]:
    names = p.str_list(node, key)
    for i, (name, item) in enumerate(zip(names, p.sequence(node, key), strict=True)):
        if name not in DEFAULT_RULES:
            p.unknown(name, item, f"{key}[{i}]", DEFAULT_RULES, "rule")
    if any(n not in DEFAULT_RULES for n in names):
        raise _Bad
    return names


def _socket_mode(p: _Parser, node: Node, key: str) -> int:
    value, from_env = p.env_scalar(node, key)
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        try:
            value = int(text, 8)
        except ValueError:
            p.fail("expected an octal file mode like '0660'", node, key)
    elif isinstance(value, bool) or not isinstance(value, int):
        p.fail(f"expected a file mode like '0660', got {p.kind(node)}", node, key)
    elif value > 0o777 and not from_env:
        p.fail(f"{value} is not a file mode; write it in octal, quoted: '0{value}'", node, key)
    if not 0 <= value <= 0o777:
        p.fail("a file mode is between '0000' and '0777'", node, key)
    return value


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


def _listen(p: _Parser, node: Node, key: str) -> str | None:
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


def _parse_defaults(p: _Parser, node: Node | None) -> dict[str, tuple[Any, Node, str]]:
    if node is None or p.is_null(node):
        return {}
    try:
        got = p.fields(node, "defaults", _HOST_SPEC, "defaults")
    except _Bad:
        return {}
    return {name: (value, vnode, f"defaults.{name}") for name, (value, vnode) in got.items()}


def _shorthand(p: _Parser, node: ScalarNode, key: str) -> dict[str, tuple[Any, Node, str]]:
    """``n3`` or ``alice@n3.example:2222`` or ``[::1]:2222`` -> name/address/user/port."""
    text = p.string(node, key).strip()
    m = _SHORTHAND.fullmatch(text)
    if not m:
        p.fail(f"expected a host name or [user@]host[:port], got '{p.raw(node)}'", node, key)
    host = m.group("v6") or m.group("host")
    out: dict[str, tuple[Any, Node, str]] = {"name": (_host_name_text(p, host, node, key), node, key)}
    if m.group("user"):
        out["user"] = (m.group("user"), node, key)
    if m.group("port"):
        port = int(m.group("port"))
        if not 1 <= port <= 65535:
            p.fail(f"port must be between 1 and 65535, got {port}", node, key)
        out["port"] = (port, node, key)
    return out


def _host_name_text(p: _Parser, name: str, node: Node, key: str) -> str:
    if not _HOST_NAME.fullmatch(_BRACKET.sub("0", name)):
        p.fail(f"host name '{p.raw(node)}' may only contain letters, digits, '.', '-', '_', ':'", node, key)
    return name


_Fields = dict[str, tuple[Any, Node, str]]


def _parse_hosts(p: _Parser, node: Node | None, defaults: _Fields) -> list[tuple[HostConfig, _Fields]]:
    if node is None:
        return []
    if p.is_null(node):
        p.error("is empty (every entry commented out?); list at least one host, e.g. '- gpu01', "
                "or write 'hosts: []' to watch none", node, "hosts")
        return []
    if isinstance(node, MappingNode):
        p.error("expected a list, got a mapping; write each host as a list item: '- name: gpu01' "
                "(or '- gpu01')", node, "hosts")
        return []
    try:
        items = p.sequence(node, "hosts")
    except _Bad:
        return []
    out: list[tuple[HostConfig, _Fields]] = []
    for index, item in enumerate(items):
        try:
            out.extend(_parse_host_entry(p, item, index, defaults))
        except _Bad:
            pass
    return out


def _entry_key(section: str, item: Node, index: int) -> str:
    """``hosts[n3]`` by name where the entry has one, else ``hosts[2]`` by position."""
    if isinstance(item, MappingNode):
        for knode, vnode in item.value:
            if isinstance(knode, ScalarNode) and knode.value == "name" and isinstance(vnode, ScalarNode):
                return f"{section}[{vnode.value}]"
    elif isinstance(item, ScalarNode) and item.tag == _TAG + "str":
        return f"{section}[{item.value}]"
    return f"{section}[{index}]"


def _parse_host_entry(p: _Parser, item: Node, index: int,
                      defaults: _Fields) -> list[tuple[HostConfig, _Fields]]:
    key = _entry_key("hosts", item, index)
    if isinstance(item, ScalarNode) and not p.is_null(item):
        own = _shorthand(p, item, key)
    elif isinstance(item, MappingNode):
        own = {name: (value, vnode, _join(key, name))
               for name, (value, vnode) in p.fields(item, key, _HOST_ENTRY_SPEC, "a host").items()}
        if "name" not in own:
            if not any(isinstance(k, ScalarNode) and k.value == "name" for k, _ in item.value):
                p.error("a host needs a name", item, key)
            raise _Bad
    else:
        p.fail(f"expected a host name or a mapping, got {p.kind(item)}", item, key)

    name_pattern, name_node, name_key = own["name"]
    try:
        names = expand_hostlist(name_pattern)
    except ValueError as exc:
        p.fail(str(exc), name_node, name_key)
    addresses = names
    if "address" in own:
        addr_pattern, addr_node, addr_key = own["address"]
        try:
            addresses = expand_hostlist(addr_pattern.strip())
        except ValueError as exc:
            p.fail(str(exc), addr_node, addr_key)
        if len(addresses) != len(names):
            p.fail(f"address expands to {len(addresses)} host(s) but name to {len(names)}; give the address "
                   "the same range as the name (or leave it out)", addr_node, addr_key)

    merged: _Fields = {**defaults, **own}
    if "tags" in defaults and "tags" in own:
        merged["tags"] = (list(dict.fromkeys(defaults["tags"][0] + own["tags"][0])), own["tags"][1],
                          own["tags"][2])
    values = {name: value for name, (value, _n, _k) in merged.items() if name not in ("name", "address")}
    hosts = []
    for name, address in zip(names, addresses, strict=True):
        hosts.append((HostConfig(name=name, address=address, **values), merged))
    return hosts


def _check_hosts(p: _Parser, hosts: list[tuple[HostConfig, _Fields]]) -> None:
    """Cross-host checks: duplicate names, key and known_hosts files, jump chains."""
    first_line: dict[str, int | None] = {}
    for host, fields in hosts:
        _n, name_node, name_key = fields["name"]
        if host.name in first_line:
            p.error(f"duplicate host name '{host.name}' (lines {first_line[host.name]} and "
                    f"{p.line_of(name_node)})", name_node, name_key)
        else:
            first_line[host.name] = p.line_of(name_node)
        if host.transport != "ssh" or not p.resolve_secrets:
            continue
        if host.key is not None and not os.path.isfile(host.key):
            _v, node, key = fields["key"]
            p.error(f"private key file not found: {host.key}", node, key)
        if (host.known_hosts is not None and host.host_key_policy != "accept-new"
                and not os.path.isfile(host.known_hosts)):
            _v, node, key = fields["known_hosts"]
            p.error(f"known_hosts file not found: {host.known_hosts} (fill it with ssh-keyscan, or set "
                    "host_key_policy: accept-new to learn keys on first connect)", node, key)
    _check_default_known_hosts(p, hosts)
    by_name = {h.name: (h, f) for h, f in hosts}
    for host, fields in hosts:
        seen = [host.name]
        hop = host.jump
        while hop is not None and hop in by_name:
            if hop in seen:
                _v, node, key = fields["jump"]
                p.error(f"jump hosts form a loop: {' -> '.join(seen + [hop])}"
                        + ("; set jump: null on the jump host" if key.startswith("defaults.") else ""),
                        node, key)
                break
            seen.append(hop)
            hop = by_name[hop][0].jump


def default_known_hosts() -> Path:
    """Where asyncssh (and gpufleet's transport) look when a host sets no known_hosts."""
    return Path("~/.ssh/known_hosts").expanduser()


def _check_default_known_hosts(p: _Parser, hosts: list[tuple[HostConfig, _Fields]]) -> None:
    """SSH hosts without known_hosts use ~/.ssh/known_hosts; under ``strict`` a missing one refuses them all.

    Reported once, at the first such host, with the count: the fix is the same file for every host.
    """
    if not p.resolve_secrets:
        return
    strict = [(h, f) for h, f in hosts
              if h.transport == "ssh" and h.known_hosts is None and h.host_key_policy != "accept-new"]
    default = default_known_hosts()
    if not strict or default.is_file():
        return
    _n, node, name_key = strict[0][1]["name"]
    entry = name_key.removesuffix(".name")
    others = f" (and {len(strict) - 1} more host{'s' if len(strict) > 2 else ''})" if len(strict) > 1 else ""
    p.error(f"no known_hosts set, and the default {default} does not exist; under host_key_policy strict "
            f"every connection to {strict[0][0].name}{others} would be refused. Fill it with ssh-keyscan, "
            "set known_hosts: to a file, or set host_key_policy: accept-new to learn keys on first connect",
            node, f"{entry}.known_hosts")


def _parse_rules(p: _Parser, node: Node | None) -> dict[str, RuleConfig]:
    rules = default_rules()
    if node is None or p.is_null(node):
        return rules
    try:
        pairs = p.pairs(node, "rules")
    except _Bad:
        return rules
    for name, knode, vnode in pairs:
        key = f"rules.{name}"
        if name not in DEFAULT_RULES:
            p.unknown(name, knode, key, DEFAULT_RULES, "rule")
            continue
        try:
            rules[name] = _parse_rule(p, name, vnode, key)
        except _Bad:
            pass
    return rules


def _parse_rule(p: _Parser, name: str, node: Node, key: str) -> RuleConfig:
    rule = RuleConfig(name=name, params=dict(DEFAULT_RULES[name]))
    if p.is_null(node):
        return rule
    if isinstance(node, ScalarNode) and node.tag == _TAG + "bool":
        rule.enabled = p.boolean(node, key)
        return rule
    spec: dict[str, Conv] = {"enabled": _Parser.boolean, **_SELECTOR_SPEC}
    for param, default in DEFAULT_RULES[name].items():
        spec[param] = _param_conv(param, default)
    got = p.fields(node, key, spec, f"rule {name}")
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
    """Converter for a rule parameter: the default's type decides (durations by name)."""
    if param in RULE_DURATION_PARAMS:
        return _nonneg
    if param == "severity":
        return lambda p, n, k: p.choice(n, k, SEVERITIES)
    bounds: dict[str, tuple[float, float]] = {"util_below": (0, 100), "power_idle_ratio": (0, 1),
                                              "stuck_power_ratio": (0, 1), "missed_intervals": (1, 1000)}
    lo, hi = bounds.get(param, (0, math.inf))
    if isinstance(default, bool):
        return _Parser.boolean
    if isinstance(default, int):
        return lambda p, n, k: p.integer(n, k, lo=int(lo), hi=None if math.isinf(hi) else int(hi))
    if isinstance(default, float):
        return lambda p, n, k: p.number(n, k, lo=lo, hi=None if math.isinf(hi) else hi)
    if isinstance(default, list) and default and isinstance(default[0], int):
        return lambda p, n, k: p.int_list(n, k, lo=0)
    if isinstance(default, list):
        return _Parser.str_list
    return lambda p, n, k: p.string(n, k)


def _parse_notifiers(p: _Parser, node: Node | None) -> list[NotifierConfig]:
    if node is None:
        return []
    try:
        items = p.sequence(node, "notifiers")
    except _Bad:
        return []
    out: list[NotifierConfig] = []
    lines: dict[str, int | None] = {}
    for index, item in enumerate(items):
        key = _entry_key("notifiers", item, index)
        try:
            got = p.fields(item, key, _NOTIFIER_SPEC, "a notifier")
        except _Bad:
            continue
        if "kind" not in got:
            if not any(isinstance(k, ScalarNode) and k.value == "kind" for k, _ in item.value):
                p.error(f"a notifier needs a kind ({', '.join(_NOTIFIER_KINDS)})", item, key)
            continue
        kind = got["kind"][0]
        name = got["name"][0] if "name" in got else kind
        if name in lines:
            p.error(f"duplicate notifier name '{name}' (first at line {lines[name]}); give each a name",
                    got.get("name", got["kind"])[1], _join(key, "name"))
        lines.setdefault(name, p.line_of(item))
        urls = ([got["url"][0]] if "url" in got else []) + (got["urls"][0] if "urls" in got else [])
        url_node = got.get("url", got.get("urls", (None, item)))[1]
        if kind == "command":
            if "command" not in got or not got["command"][0]:
                p.error("a command notifier needs command (a string or a list)", item, key)
            if urls:
                p.error("a command notifier takes command, not url/urls", url_node, _join(key, "url"))
        else:
            if not urls:
                if "url" not in got and "urls" not in got and not _has_key(item, ("url", "urls")):
                    p.error(f"a {kind} notifier needs url or urls", item, key)
            if "command" in got:
                p.error(f"command applies to command notifiers only, not {kind}", got["command"][1],
                        _join(key, "command"))
            if kind in ("webhook", "alertmanager") and p.resolve_secrets:
                for u in urls:
                    if urlsplit(u).scheme not in ("http", "https") or not urlsplit(u).netloc:
                        p.error(f"a {kind} url must be http:// or https://", url_node, _join(key, "url"))
                        break
        if "headers" in got and kind not in ("webhook", "alertmanager"):
            p.error("headers apply to webhook and alertmanager notifiers only", got["headers"][1],
                    _join(key, "headers"))
        values = {k: v for k, (v, _n) in got.items() if k not in ("name", "kind", "url", "urls")}
        out.append(NotifierConfig(name=name, kind=kind, urls=urls, **values))
    return out


def _has_key(node: Node, names: tuple[str, ...]) -> bool:
    return isinstance(node, MappingNode) and any(
        isinstance(k, ScalarNode) and k.value in names for k, _ in node.value)


def _section(p: _Parser, node: Node | None, key: str,
             spec: Mapping[str, Conv]) -> dict[str, tuple[Any, Node]]:
    if node is None or p.is_null(node):
        return {}
    try:
        return p.fields(node, key, spec, key)
    except _Bad:
        return {}


def _values(fields: Mapping[str, tuple[Any, Node]]) -> dict[str, Any]:
    return {k: v for k, (v, _n) in fields.items()}


# --------------------------------------------------------------------------------------------- public API

def parse_config(text: str, source: str = "<config>", *, base_dir: str | Path | None = None,
                 env: Mapping[str, str] | None = None, resolve_secrets: bool = True) -> Config:
    """Validate YAML ``text`` into a :class:`Config`; raise :class:`ConfigErrors` listing every mistake.

    ``source`` names the file in errors; relative paths resolve against ``base_dir`` (default: the
    directory of ``source``). ``resolve_secrets=False`` is for clients that only need paths (socket,
    database): unset env refs stay as written, and secret files, key files and known_hosts are not read.
    """
    base = Path(base_dir) if base_dir is not None else Path(source).expanduser().absolute().parent
    p = _Parser(source, base, os.environ if env is None else env, resolve_secrets)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML does not allow tabs)"
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
            if name in _TOP_KEYS:
                top[name] = vnode
            else:
                p.unknown(name, knode, name, _TOP_KEYS, "top-level key")
    except _Bad:
        pass

    defaults = _parse_defaults(p, top.get("defaults"))
    hosts = _parse_hosts(p, top.get("hosts"), defaults)
    _check_hosts(p, hosts)
    config.hosts = [h for h, _f in hosts]
    config.storage = StorageConfig(**_values(_section(p, top.get("storage"), "storage", _STORAGE_SPEC)))
    config.rules = _parse_rules(p, top.get("rules"))
    config.notifiers = _parse_notifiers(p, top.get("notifiers"))
    alerting = _section(p, top.get("alerting"), "alerting", _ALERTING_SPEC)
    config.alerting = AlertingConfig(**_values(alerting))
    if config.alerting.notify_users:
        where = alerting["notify_users"][1]
        if not config.alerting.user_notifier:
            p.error("notify_users needs user_notifier (an apprise mailto:// URL to send user mail with)",
                    where, "alerting.notify_users")
        if not config.alerting.user_email_domain and not config.alerting.user_emails:
            p.error("notify_users needs user_email_domain or user_emails to find addresses",
                    where, "alerting.notify_users")
    config.api = ApiConfig(**_values(_section(p, top.get("api"), "api", _API_SPEC)))
    config.metrics = MetricsConfig(**_values(_section(p, top.get("metrics"), "metrics", _METRICS_SPEC)))
    if "max_concurrent_connects" in top:
        with contextlib.suppress(_Bad):
            config.max_concurrent_connects = p.integer(top["max_concurrent_connects"],
                                                       "max_concurrent_connects", lo=1, hi=1024)

    if p.errors:
        unique = {(e.line, e.key, e.reason): e for e in p.errors}
        raise ConfigErrors(sorted(unique.values(), key=lambda e: e.line or 0))
    return config


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None,
                resolve_secrets: bool = True) -> Config:
    """Read and validate a config file; raise :class:`ConfigErrors` (file:line: key: ...) on mistakes."""
    source = str(path)
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigErrors([ConfigError(f"cannot read config: {exc.strerror or exc}", path=source)]) from None
    except UnicodeDecodeError as exc:
        raise ConfigErrors([ConfigError(f"config is not UTF-8 text: {exc.reason}", path=source)]) from None
    base = Path(path).expanduser().absolute().parent
    return parse_config(text, source, base_dir=base, env=env, resolve_secrets=resolve_secrets)


def find_config() -> Path | None:
    """$GPUFLEET_CONFIG, ./gpufleet.yaml, ~/.config/gpufleet/gpufleet.yaml, /etc/gpufleet/gpufleet.yaml.

    $GPUFLEET_CONFIG is returned even when missing, so loading it reports the mistake.
    """
    explicit = os.environ.get("GPUFLEET_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for candidate in (Path("gpufleet.yaml"), Path(xdg) / "gpufleet" / "gpufleet.yaml",
                      Path("/etc/gpufleet/gpufleet.yaml")):
        if candidate.is_file():
            return candidate
    return None


def default_config() -> Config:
    """No config file: watch this machine through the ``local`` transport, all rules at their defaults."""
    name = socket.gethostname() or "localhost"
    local = HostConfig(name=name, address="localhost", transport="local")
    return Config(hosts=[local], rules=default_rules())
