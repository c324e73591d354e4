"""Shutdown shared by the collector's asyncio servers (query API, metrics). Both track their connection
tasks because ``Server.close()`` stops only the listener: connections already accepted would run on."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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
