"""Where the CLI's answers come from: the socket and database a config (or ``--socket``, ``--db``,
``--collector``) names, and the choice among the live collector, a running demo, several collectors merged,
and the database read-only when the collector is down.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.cli.client import (
    DEFAULT_TIMEOUT,
    EXIT_USAGE,
    ApiClient,
    Backend,
    CliError,
    CollectorUnavailable,
)
from gpufleet.collector.addresses import CollectorAddress, parse_address
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.model.thresholds import Thresholds, thresholds_of
from gpufleet.collector.settings import ApiConfig, StorageConfig, default_runtime_dir, find_config


def parse_collector(text: str) -> CollectorAddress:
    """``--collector TEXT`` (or one item of $GPUFLEET_COLLECTORS) as an address; a usage error if not one."""
    try:
        return parse_address(text)
    except ValueError as exc:
        raise CliError(f"--collector: {exc}", EXIT_USAGE) from None


@dataclass(slots=True)
class Endpoints:
    """Where to look: the socket, and the database for the fallback (resolved lazily from the config)."""

    config_path: str | None = None
    socket: str | None = None
    db: str | None = None
    #: the config's rule thresholds, so the fallback classifies GPUs as the collector does
    thresholds: Thresholds | None = None
    #: several collectors (shards, replicas) asked at once: ``--collector``, $GPUFLEET_COLLECTORS
    collectors: list[str] = field(default_factory=list)
    #: the config's ``collectors:``, asked when none is named and no socket either
    config_collectors: list[CollectorAddress] = field(default_factory=list)
    _loaded: bool = False
    _named: bool = False  # the socket was given before the config was read (not taken from it)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        self._named = self.socket is not None
        path = self.config_file()
        if path is not None:
            from gpufleet.collector.config import load_config, split  # yaml, the loader: only with a file

            try:
                cfg = load_config(path, resolve_secrets=False, with_hosts=False)  # the hosts: the collector's
            except ConfigError as exc:
                raise CliError(str(exc).splitlines()[0], EXIT_USAGE) from None
            api, storage = cfg.api, cfg.storage
            # the config's collectors, else its workers' sockets (workers: N): both are asked and merged
            self.config_collectors = list(cfg.collectors) or split.worker_addresses(cfg)
            self.thresholds = thresholds_of(cfg.rules)
        else:
            api, storage = ApiConfig(), StorageConfig()
        if self.socket is None:
            self.socket = str(api.resolved_socket())
        if self.db is None:
            self.db = str(storage.resolved_path())

    def collector_addresses(self) -> list[CollectorAddress]:
        """The collectors to merge: ``--collector`` / $GPUFLEET_COLLECTORS, else (when no socket was named)
        the config's ``collectors:``; empty: the one collector of the socket."""
        if self.collectors:
            return [parse_collector(c) for c in self.collectors]
        if self.socket is not None and not self._loaded:
            return []  # --socket / $GPUFLEET_SOCKET: that collector alone
        self._load()
        return [] if self._named else self.config_collectors

    def config_file(self) -> Path | None:
        """``-c/--config``, else the first file :func:`~gpufleet.collector.settings.find_config` finds."""
        if self.config_path:
            return Path(self.config_path)
        return find_config()

    @property
    def chosen(self) -> bool:
        """The socket was named (``--socket``, $GPUFLEET_SOCKET) or a config file was (``-c``): never
        redirected to a running demo."""
        return bool(self.config_path) or (self._named if self._loaded else self.socket is not None)

    def socket_path(self) -> str:
        if self.socket is None:
            self._load()
        assert self.socket is not None
        return self.socket

    def db_path(self) -> str:
        if self.db is None:
            self._load()
        assert self.db is not None
        return self.db


def connect(
    ends: Endpoints,
    *,
    fallback: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    notice: Callable[[str], None] | None = None,
) -> Backend:
    """The live collector if it answers, else a running ``gpufleet demo`` (when no socket or config was
    named), else (``fallback``) the database read-only, else exit 3. With collectors named (``--collector``,
    or the config's ``collectors:``), all of them at once, merged (:mod:`gpufleet.cli.remote`)."""
    addresses = ends.collector_addresses()
    if addresses:
        from gpufleet.cli.remote import MultiBackend  # threads, and asyncssh for a collector over SSH

        return MultiBackend(addresses, timeout=timeout, notice=notice, thresholds=ends.thresholds)
    chosen = ends.chosen
    client = ApiClient(ends.socket_path(), timeout=timeout)
    try:
        client.connect()
        return client
    except CollectorUnavailable as exc:
        demo = None if chosen else running_demo(timeout)
        if demo is not None:
            return demo
        if not fallback:
            raise
        reason = str(exc)
    db = ends.db_path()
    if not os.path.isfile(db):
        from gpufleet.cli.hints import start_hint

        raise CollectorUnavailable(f"{reason} and no history at {db} — {start_hint()}")
    from gpufleet.cli.fallback import StoreFallback  # asyncio, aiosqlite and the store: only when needed

    return StoreFallback(db, notice=notice if notice is not None else _stderr, thresholds=ends.thresholds)


def _stderr(message: str) -> None:
    print(f"gpufleet: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- the running demo's socket

POINTER_NAME = "current-demo.json"


def pointer_path() -> Path:
    """Where ``gpufleet demo`` says which socket it serves: this user's runtime folder, next to the default
    socket (so only this user, and a CLI that would look at the default socket, ever reads it)."""
    return default_runtime_dir() / POINTER_NAME


def write_pointer(socket_path: str | Path) -> Path:
    """Point plain ``gpufleet ...`` commands at a demo's socket (atomically: a reader sees all or nothing)."""
    target = pointer_path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"socket": str(socket_path), "pid": os.getpid()}) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def clear_pointer(socket_path: str | Path) -> None:
    """Remove the pointer if it still names ``socket_path`` (a newer demo's pointer stays)."""
    target = pointer_path()
    if _pointed_socket(target) == str(socket_path):
        try:
            target.unlink()
        except FileNotFoundError:
            pass


def running_demo(timeout: float = DEFAULT_TIMEOUT) -> ApiClient | None:
    """A connected client of the demo the pointer names, or None (no pointer, or its demo is gone)."""
    path = _pointed_socket(pointer_path())
    if path is None:
        return None
    client = ApiClient(path, timeout=timeout)
    try:
        client.connect()
    except CollectorUnavailable:
        return None
    return client


def _pointed_socket(target: Path) -> str | None:
    try:
        doc = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sock = doc.get("socket") if isinstance(doc, dict) else None
    return sock if isinstance(sock, str) and sock else None
