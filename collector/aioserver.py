"""What the collector's asyncio servers share (query API, metrics, web page): binding a listen address with
a clear config error, their URL, and shutdown. They track their connection tasks because
``Server.close()`` stops only the listener: connections already accepted would run on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from gpufleet.collector.errors import ConfigError

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
