"""Reach a host before spending a connect slot on it: TCP connect, then wait for the server's first byte.

A powered-off host drops SYNs and a wedged one (kernel alive, sshd stuck) completes TCP but never sends its
banner; either way the caller only waits on a timer here, so dead hosts cost no connect slot and the
reachable ones do not queue behind them. RFC 4253 makes the server send its identification string on
connect, so "readable" means the SSH handshake can start (or the peer closed: asyncssh reports that).

Errors are what ``loop.create_connection`` raises (``socket.gaierror``, ``OSError`` with errno,
``TimeoutError`` from the caller's ``wait_for``), so the messages built from them stay the same.
"""

from __future__ import annotations

import asyncio
import socket


async def tcp_connect(address: str, port: int) -> socket.socket:
    """A connected non-blocking socket to the first address of ``address`` that answers."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError("getaddrinfo() returned empty list")
    errors: list[OSError] = []
    for family, kind, proto, _name, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    # as asyncio.create_connection words it: one error as is, several only if they differ
    if len(errors) == 1 or all(str(e) == str(errors[0]) for e in errors):
        raise errors[0]
    raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")


async def wait_readable(sock: socket.socket) -> None:
    """Until ``sock`` has data (or EOF) to read; reads nothing, so asyncssh still sees the banner."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def reach(address: str, port: int, timeout: float) -> socket.socket:
    """TCP connect and the server's first byte, both within ``timeout`` seconds (else TimeoutError)."""
    sock: socket.socket | None = None

    async def both() -> socket.socket:
        nonlocal sock
        sock = await tcp_connect(address, port)
        await wait_readable(sock)
        return sock

    try:
        return await asyncio.wait_for(both(), timeout)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
