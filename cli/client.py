"""How the CLI asks a collector: the query socket's client, the backend interface every source of answers
implements, and the CLI's errors with their exit codes.

The backends (this socket client, the SQLite file read-only when the collector is down in
:mod:`gpufleet.cli.fallback`, several collectors merged in :mod:`gpufleet.cli.remote`) take the same ops and
return the same JSON-shaped results, so commands never care which one answered; :mod:`gpufleet.cli.connect`
chooses. The socket client is plain blocking ``socket``: no asyncio import on the fast path, which keeps
``gpufleet status`` quick to start.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpufleet.collector.model.codec import fleet_view_from_dict, to_json
from gpufleet.collector.model.views import FleetView

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
    merged: bool  # several collectors' answers merged (the CLI does what one collector would do itself)

    def call(self, op: str, **args: Any) -> Any: ...

    def status_later(self, **args: Any) -> Callable[[], FleetView]:
        """The status model, asked for now and rebuilt when the returned call is made (the renderer's
        imports run in between)."""
        ...


def one_status_later(backend: Backend, args: dict[str, Any]) -> Callable[[], FleetView]:
    """A single collector's status: asked and rebuilt from its JSON when the call is made."""
    return lambda: fleet_view_from_dict(backend.call("status", **args))


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
    merged = False

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

    def status_later(self, **args: Any) -> Callable[[], FleetView]:
        return one_status_later(self, args)

    def call_compact(self, op: str, **args: Any) -> bytes:
        """The result as compact JSON bytes, as :func:`gpufleet.collector.model.codec.to_json` writes it: our
        collector encodes its answers that way, so a successful answer's bytes pass straight through (no
        decode and re-encode of megabytes); anything else (an older collector's answer) is decoded and
        encoded the same way, so the bytes do not depend on the collector's version."""
        data = self._exchange(op, args)
        if data.startswith(_OK_PREFIX) and data.endswith(b"}\n"):
            return data[len(_OK_PREFIX) : -2]
        return to_json(self._decode(data))

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
