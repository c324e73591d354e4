"""Walking composed YAML nodes by hand, so every value keeps its line and every mistake is recorded.

:class:`Parser` converts scalars (strings, numbers, durations, paths, secrets) and collects
``file:line: key: message`` errors; the section modules say which keys exist and what they hold.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from gpufleet.collector import units
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.secrets import SecretError, is_reference, read_secret
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


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



def parse_duration(value: object, *, key: str | None = None, path: str | None = None,
                   line: int | None = None) -> float:
    """Seconds from a number or ``90s``/``30m``/``2h``/``1d``/``1h30m``/``500ms``; never negative.

    The grammar and bounds are :func:`gpufleet.collector.units.parse_duration`'s; this adds the place.
    Raises :class:`ConfigError` (with the given ``key``/``path``/``line``) on anything else.
    """
    try:
        return units.parse_duration(value)
    except units.DurationError as exc:
        raise ConfigError(exc.reason, path=path, line=line, key=key) from None



class Bad(Exception):
    """A value was wrong; its error is already recorded."""


Conv = Callable[["Parser", Node, str], Any]
_T = TypeVar("_T")

TAG = "tag:yaml.org,2002:"
_ENV_REF = re.compile(r"\$(\$)?\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class Parser:
    """Walks composed YAML nodes, converting values and recording errors with their lines."""

    def __init__(self, source: str, base_dir: Path, env: Mapping[str, str], resolve_secrets: bool) -> None:
        self.source, self.base_dir, self.env = source, base_dir, env
        self.resolve_secrets = resolve_secrets
        self.errors: list[ConfigError] = []
        self.warnings: list[ConfigError] = []  # worth saying, not worth refusing the config for
        self._constructor = yaml.constructor.SafeConstructor()

    # ---- errors

    def line_of(self, node: Node | None) -> int | None:
        return node.start_mark.line + 1 if node is not None else None

    def error(self, message: str, node: Node | None, key: str | None) -> None:
        self.errors.append(ConfigError(message, path=self.source, line=self.line_of(node), key=key))

    def warn(self, message: str, node: Node | None, key: str | None) -> None:
        self.warnings.append(ConfigError(f"warning: {message}", path=self.source, line=self.line_of(node),
                                         key=key))

    def fail(self, message: str, node: Node | None, key: str | None) -> NoReturn:
        self.error(message, node, key)
        raise Bad

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
                "str": "a string", "timestamp": "a date"}.get(node.tag.removeprefix(TAG), "a value")

    @staticmethod
    def raw(node: Node) -> str:
        """The value as written in the file (``${VAR}`` unexpanded), safe to show in errors."""
        return str(node.value) if isinstance(node, ScalarNode) else "..."

    @staticmethod
    def is_null(node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == TAG + "null"

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
            if knode.tag == TAG + "merge":
                sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for src in sources:
                    if id(src) in seen:
                        self.error("recursive merge", knode, key)
                        continue
                    try:
                        merged.extend(self.pairs(src, key, seen))
                    except Bad:
                        pass
                continue
            name = self.scalar(knode, key) if isinstance(knode, ScalarNode) else None
            if not isinstance(name, str):
                self.error(f"keys must be strings, got {self.kind(knode)}", knode, key)
                continue
            if name in explicit:
                first = self.line_of(explicit[name][1])
                self.error(f"duplicate key '{name}' (first at line {first})", knode, join_key(key, name))
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
            sub = join_key(key, name)
            conv = spec.get(name)
            if conv is None:
                self.unknown(name, knode, sub, spec, "key", what)
                continue
            try:
                out[name] = (conv(self, vnode, sub), vnode)
            except Bad:
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
        self._in_range(value, lo, hi, from_env, node, key)
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
        self._in_range(value, lo, hi, from_env, node, key)
        return float(value)

    def _in_range(self, value: float, lo: float | None, hi: float | None, from_env: bool, node: Node,
                  key: str) -> None:
        """At least ``lo``, at most ``hi`` (a value from the environment is not echoed: it may be secret)."""
        shown = "" if from_env else f", got {value}"
        if lo is not None and value < lo:
            self.fail(f"must be at least {lo}{shown}", node, key)
        if hi is not None and value > hi:
            self.fail(f"must be at most {hi}{shown}", node, key)

    def duration(self, node: Node, key: str, *, positive: bool = False) -> float:
        value, from_env = self.env_scalar(node, key)
        if not isinstance(node, ScalarNode):
            self.fail(f"expected a duration, got {self.kind(node)}; {units.DURATION_HELP}", node, key)
        try:
            seconds = parse_duration(value)
        except ConfigError as exc:
            self.fail(f"bad duration from the environment; {units.DURATION_HELP}" if from_env else exc.reason,
                      node, key)
        if positive and seconds <= 0:
            self.fail("must be greater than 0", node, key)
        return seconds

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
            except Bad:
                bad = True
        if bad:
            raise Bad
        return out

    def str_list(self, node: Node, key: str) -> list[str]:
        return self.each(node, key, self.string)

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
                out[name] = conv(self, vnode, join_key(key, name))
            except Bad:
                bad = True
        if bad:
            raise Bad
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
        if not self.resolve_secrets or not is_reference(value):
            return value
        try:
            return read_secret(value, env=self.env, base_dir=self.base_dir)
        except SecretError as exc:
            self.fail(str(exc), node, key)

    def secret_list(self, node: Node, key: str) -> list[str]:
        return self.each(node, key, self.secret)


def join_key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _did_you_mean(name: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _suggest(name: str, valid: Iterable[str]) -> str:
    opts = list(valid)
    close = difflib.get_close_matches(name, opts, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else ""
    if not close or len(opts) <= 24:  # every rule name (20) is still listed
        hint = (hint + " " if hint else "") + "valid: " + ", ".join(opts)
    return hint


def opt_path(p: Parser, n: Node, k: str) -> str | None:
    return None if p.is_null(n) else p.path(n, k)


def entry_key(section: str, item: Node, index: int) -> str:
    """``hosts[n3]`` by name where the entry has one, else ``hosts[2]`` by position."""
    if isinstance(item, MappingNode):
        for knode, vnode in item.value:
            if isinstance(knode, ScalarNode) and knode.value == "name" and isinstance(vnode, ScalarNode):
                return f"{section}[{vnode.value}]"
    elif isinstance(item, ScalarNode) and item.tag == TAG + "str":
        return f"{section}[{item.value}]"
    return f"{section}[{index}]"


def has_key(node: Node, names: tuple[str, ...]) -> bool:
    return isinstance(node, MappingNode) and any(
        isinstance(k, ScalarNode) and k.value in names for k, _ in node.value)


def section(p: Parser, node: Node | None, key: str,
             spec: Mapping[str, Conv]) -> dict[str, tuple[Any, Node]]:
    if node is None or p.is_null(node):
        return {}
    try:
        return p.fields(node, key, spec, key)
    except Bad:
        return {}


def values_of(fields: Mapping[str, tuple[Any, Node]]) -> dict[str, Any]:
    return {k: v for k, (v, _n) in fields.items()}


