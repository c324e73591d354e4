"""How the CLI gets its answers: the collector's query socket, or the SQLite file read-only when it is down.

Both backends take the same ops and return the same JSON-shaped results, so commands never care which one
answered (the fallback says so once on stderr). The socket client is plain blocking ``socket``: no asyncio
import on the fast path, which keeps ``gpufleet status`` quick to start.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpufleet.collector.addresses import CollectorAddress
    from gpufleet.collector.model.classify import Thresholds

API_VERSION = 1
CONNECT_TIMEOUT = 2.0
DEFAULT_TIMEOUT = 30.0

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_DENIED = 4  # the collector (or the socket's file mode) refused this user


class CliError(Exception):
    """An error to show as one line ``gpufleet: ...`` and exit with ``code``."""

    def __init__(self, message: str, code: int = EXIT_RUNTIME) -> None:
        self.code = code
        super().__init__(message)


class CollectorUnavailable(CliError):
    """Nothing answers on the socket (absent, refused)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_UNREACHABLE)


class SocketForbidden(CliError):
    """The socket exists but this user may not open it: a collector runs, so stored data would mislead."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_DENIED)


class ApiError(CliError):
    """The collector answered ``ok: false``; the message is its one-line error."""


class PermissionDenied(ApiError):
    """The collector refused the op for this user (``code: permission_denied``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_DENIED)


def api_error(response: dict[str, Any]) -> ApiError:
    """The error of an ``ok: false`` answer, typed by its ``code``."""
    message = str(response.get("error", "unknown error"))
    return PermissionDenied(message) if response.get("code") == "permission_denied" else ApiError(message)


class Backend(Protocol):
    source: str  # "live" | "store"
    where: str  # socket or database path, for messages

    def call(self, op: str, **args: Any) -> Any: ...


# ----------------------------------------------------------------------------------------- the socket

_OK_PREFIX = b'{"ok":true,"result":'  # how the collector's encoder starts every successful answer


def request_line(op: str, args: dict[str, Any]) -> bytes:
    """One request as the collector reads it: a JSON line (``None`` arguments left out)."""
    body = {"op": op, "args": {k: v for k, v in args.items() if v is not None}, "v": API_VERSION}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def decode_answer(data: bytes, where: str) -> Any:
    """The result of one answer line; the collector's error as its typed :class:`ApiError`."""
    try:
        response = json.loads(data)
    except ValueError:
        raise CliError(f"the collector at {where} sent a malformed answer") from None
    if not isinstance(response, dict) or "ok" not in response:
        raise CliError(f"the collector at {where} sent a malformed answer")
    if not response["ok"]:
        raise api_error(response)
    return response.get("result")


class ApiClient:
    """One request per call over the collector's Unix socket (JSON line each way)."""

    source = "live"

    def __init__(self, path: str | Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.timeout = timeout
        self._sock: socket.socket | None = None

    def connect(self) -> None:
        """Open the connection now; :class:`CollectorUnavailable` when nothing listens."""
        if self._sock is not None:
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(CONNECT_TIMEOUT)
        try:
            s.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            s.close()
            raise CollectorUnavailable(f"collector not running (no socket at {self.path})") from None
        except PermissionError:
            s.close()
            raise SocketForbidden(
                f"permission denied on the collector socket {self.path} (ask the collector's admin to add "
                "you to its api.group)"
            ) from None
        except OSError as exc:
            s.close()
            raise CollectorUnavailable(
                f"cannot reach the collector at {self.path}: {exc.strerror or exc}"
            ) from None
        s.settimeout(self.timeout)
        self._sock = s

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def call(self, op: str, **args: Any) -> Any:
        return self._decode(self._exchange(op, args))

    def call_compact(self, op: str, **args: Any) -> bytes:
        """The result as compact JSON bytes, as :func:`gpufleet.collector.fleet.query.to_json` writes it: our
        collector encodes its answers that way, so a successful answer's bytes pass straight through (no
        decode and re-encode of megabytes); anything else (an older collector's answer) is decoded and
        encoded the same way, so the bytes do not depend on the collector's version."""
        data = self._exchange(op, args)
        if data.startswith(_OK_PREFIX) and data.endswith(b"}\n"):
            return data[len(_OK_PREFIX) : -2]
        result = self._decode(data)
        from gpufleet.collector.fleet.query import to_json  # the rare path: not imported by every status

        return to_json(result)

    def _exchange(self, op: str, args: dict[str, Any]) -> bytes:
        return self.exchange_line(request_line(op, args), op)

    def exchange_line(self, line: bytes, op: str) -> bytes:
        """Send one request line as :func:`request_line` makes it (for ``op``); the answer's bytes."""
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(line)
            data = self._read_line(self._sock)
        except TimeoutError:
            self.close()
            raise CliError(
                f"the collector at {self.path} did not answer {op!r} within {self.timeout:.0f} s"
            ) from None
        except OSError as exc:
            self.close()
            raise CliError(
                f"lost the connection to the collector at {self.path}: {exc.strerror or exc}"
            ) from None
        return data

    def _decode(self, data: bytes) -> Any:
        return decode_answer(data, str(self.path))

    @staticmethod
    def _read_line(sock: socket.socket) -> bytes:
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionResetError(errno.ECONNRESET, "connection closed before the answer ended")
            if chunk.endswith(b"\n"):  # the server writes one whole line; a newline only ever ends it
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)


# ---------------------------------------------------------------------------------- the SQLite file


class StoreFallback:
    """Answers ops from the SQLite file, opened read-only, with the collector's own handler code."""

    source = "store"

    def __init__(self, db: str | Path, *, notice: Callable[[str], None] | None = None,
                 thresholds: Thresholds | None = None) -> None:
        self.db = Path(db)
        self.thresholds = thresholds
        self.where = str(self.db)
        self._notice = notice
        self._noticed = False

    def call(self, op: str, **args: Any) -> Any:
        import asyncio

        return asyncio.run(self._call(op, {k: v for k, v in args.items() if v is not None}))

    async def _call(self, op: str, args: dict[str, Any]) -> Any:
        from gpufleet.collector.errors import StorageError
        from gpufleet.collector.faces.api import StoreOps, dispatch, plain
        from gpufleet.collector.settings import StorageConfig
        from gpufleet.collector.store.store import Store

        try:
            store = await Store.open(StorageConfig(path=str(self.db)), readonly=True)
        except StorageError as exc:
            raise CliError(f"cannot read history at {self.db}: {exc}") from None
        try:
            if not self._noticed:
                self._noticed = True
                if self._notice is not None:
                    last = max((s.ts for s in (await store.latest()).values()), default=None)
                    from gpufleet.cli.timeparse import fmt_ago

                    self._notice(
                        f"collector not running; showing stored data from {self.db} "
                        f"(last sample {fmt_ago(last)})"
                    )
            from gpufleet.collector.model.classify import DEFAULT_THRESHOLDS

            ops = StoreOps(store, thresholds=self.thresholds or DEFAULT_THRESHOLDS).table()
            response = await dispatch(ops, {"op": op, "args": args, "v": API_VERSION})
        finally:
            await store.close()
        if not response["ok"]:
            raise api_error(response)
        return plain(response["result"])  # the same JSON shapes the socket gives


# ------------------------------------------------------------------------------------------- choosing


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
        from gpufleet.collector.settings import ApiConfig, StorageConfig

        path = self.config_file()
        if path is not None:
            from gpufleet.collector.config import load_config
            from gpufleet.collector.errors import ConfigError

            try:
                cfg = load_config(path, resolve_secrets=False, with_hosts=False)  # the hosts: the collector's
            except ConfigError as exc:
                raise CliError(str(exc).splitlines()[0], EXIT_USAGE) from None
            api, storage = cfg.api, cfg.storage
            from gpufleet.collector.shards import worker_addresses

            # the config's collectors, else its workers' sockets (workers: N): both are asked and merged
            self.config_collectors = list(cfg.collectors) or worker_addresses(cfg)
            from gpufleet.collector.model.classify import thresholds_of

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
            from gpufleet.cli.remote import parse_collector

            return [parse_collector(c) for c in self.collectors]
        if self.socket is not None and not self._loaded:
            return []  # --socket / $GPUFLEET_SOCKET: that collector alone
        self._load()
        return [] if self._named else self.config_collectors

    def config_file(self) -> Path | None:
        """``-c/--config``, else the first file :func:`~gpufleet.collector.config.find_config` finds."""
        if self.config_path:
            return Path(self.config_path)
        from gpufleet.collector.config import find_config

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
        from gpufleet.cli.remote import MultiBackend

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
        raise CollectorUnavailable(
            f"{reason} and no history at {db} — start it with `gpufleet collector run`"
        )
    return StoreFallback(db, notice=notice if notice is not None else _stderr, thresholds=ends.thresholds)


def _stderr(message: str) -> None:
    print(f"gpufleet: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- the running demo's socket

POINTER_NAME = "current-demo.json"


def pointer_path() -> Path:
    """Where ``gpufleet demo`` says which socket it serves: this user's runtime folder, next to the default
    socket (so only this user, and a CLI that would look at the default socket, ever reads it)."""
    from gpufleet.collector.settings import default_runtime_dir

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
