"""What the collector's asyncio servers share (query API, metrics, web page): binding a listen address with
a clear config error, their URL, shutdown, and the little HTTP/1.1 that /metrics and the web page speak.

Servers track their connection tasks because ``Server.close()`` stops only the listener: connections
already accepted would run on. HTTP is one request per connection, the head bounded in size (the stream's
``limit``) and time, so a slow or hostile client holds one connection slot for ``read_timeout`` at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from gpufleet.collector.config import parse_listen  # config's parser owns the listen syntax
from gpufleet.collector.errors import ConfigError

log = logging.getLogger(__name__)
_S = TypeVar("_S", bound="HttpServer")
_T = TypeVar("_T")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def bind_tcp(handle: Handler, host: str, port: int, *, limit: int, listen: str,
                   key: str) -> tuple[asyncio.AbstractServer, int]:
    """Listen on ``host:port`` (0: any free port); the server and its real port. A bind failure is the
    config's mistake, named by its ``key`` (``metrics.listen``, ``web.listen``)."""
    try:
        server = await asyncio.start_server(handle, host, port, limit=limit)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror or exc}", key=key) from exc
    return server, int(server.sockets[0].getsockname()[1])


def http_url(host: str, port: int, path: str) -> str:
    """``http://127.0.0.1:9835/metrics``; an IPv6 host in brackets."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


async def close_server(server: asyncio.AbstractServer, conns: set[asyncio.Task[Any]]) -> None:
    """Stop listening, cancel the connection tasks still running, then wait (bounded) for the server."""
    server.close()
    for task in list(conns):
        task.cancel()
    if conns:
        await asyncio.gather(*conns, return_exceptions=True)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5.0)


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close one connection; a peer that does not read its end cannot hold the handler for long."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 1.0)


# ------------------------------------------------------------------------------------------- HTTP

REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                return v
        return None


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_request(reader: asyncio.StreamReader, timeout: float) -> Request | None:
    """The next request head, or None when the client left first; :class:`HttpError` when it is bad."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    except asyncio.TimeoutError:
        raise HttpError(408, "request timeout") from None
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "bad request line")
    method, target, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpError(400, "bad header line")
            headers[name.strip().lower()] = value.strip()
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return Request(method, unquote(url.path), query, headers)


def response_head(status: int, content_type: str, length: int | None,
                  extra: Sequence[tuple[str, str]] = ()) -> bytes:
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", f"Content-Type: {content_type}",
            "Connection: close", "Cache-Control: no-store"]
    if length is not None:
        head.append(f"Content-Length: {length}")
    head += [f"{k}: {v}" for k, v in extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


async def respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, *,
                  timeout: float, extra: Sequence[tuple[str, str]] = (), head_only: bool = False) -> None:
    writer.write(response_head(status, content_type, len(body), extra))
    if not head_only:
        writer.write(body)
    await asyncio.wait_for(writer.drain(), timeout)


# ----------------------------------------------------------------------------------------- server

class InThread(Protocol):
    """:meth:`HttpServer.in_thread`'s shape, for the parts of a server that build off its loop."""

    def __call__(self, fn: Callable[..., _T], *args: Any) -> Awaitable[_T]: ...


class HttpServer:
    """One listener speaking the little HTTP/1.1 above: bind, connection bound and tracking, shutdown.

    /metrics and the web page differ only in how they answer a parsed request (:meth:`_route`) and in the
    headers of a plain-text answer (:meth:`_text`); the connection's life (the bound, a bad head answered
    with its status, a failing handler never killing the server, the writer closed) is written here once.
    """

    what = "http"  # for the log and thread names: "metrics", "web page"

    def __init__(self, listen: str, key: str, *, read_timeout: float, write_timeout: float,
                 max_header_bytes: int, max_connections: int, path: str = "/") -> None:

        self.listen, self.listen_key, self.path = listen, key, path
        self._host, self._want_port = parse_listen(listen)
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.max_header_bytes = max_header_bytes
        self.max_connections = max_connections
        self._server: asyncio.AbstractServer | None = None
        self._port: int | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._executor: ThreadPoolExecutor | None = None

    async def in_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on this server's own two threads, never the default executor: whatever else holds
        those (getaddrinfo, a hanging library call) cannot delay a scrape or a page, nor they it."""
        if self._executor is None:
            name = f"gpufleet-{self.what.replace(' ', '-')}"
            self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix=name)
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    @property
    def port(self) -> int:
        """The bound port (the real one when listen asked for port 0)."""
        if self._port is None:
            raise RuntimeError(f"{self.what} server not started")
        return self._port

    @property
    def url(self) -> str:
        return http_url(self._host, self.port, self.path)

    def _listening_note(self) -> str:
        """Said after the URL in the log line (the web page: whether a token is needed)."""
        return ""

    async def start(self) -> None:
        self._server, self._port = await bind_tcp(self._handle, self._host, self._want_port,
                                                  limit=self.max_header_bytes, listen=self.listen,
                                                  key=self.listen_key)
        log.info("%s on %s%s", self.what, self.url, self._listening_note())

    async def stop(self) -> None:
        if self._server is not None:
            await close_server(self._server, self._conns)
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def __aenter__(self: _S) -> _S:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _route(self, req: Request, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _text(self, writer: asyncio.StreamWriter, status: int, text: str,
                    extra: Sequence[tuple[str, str]] = ()) -> None:
        await respond(writer, status, (text + "\n").encode(), "text/plain; charset=utf-8",
                      timeout=self.write_timeout, extra=extra)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            if len(self._conns) > self.max_connections:
                await self._text(writer, 503, "too many connections")
                return
            try:
                req = await read_request(reader, self.read_timeout)
                if req is not None:  # None: the client left before finishing its request
                    await self._route(req, writer)
            except HttpError as exc:
                await self._text(writer, exc.status, str(exc))
        except (ConnectionError, asyncio.TimeoutError):
            pass
        except Exception:  # noqa: BLE001 - a bad request must never kill the server
            log.exception("%s: request failed", self.what)
            with contextlib.suppress(Exception):
                await self._text(writer, 500, "internal error")
        finally:
            self._conns.discard(task)
            await close_writer(writer)
