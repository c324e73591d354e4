"""Several collectors as one backend: the CLI asks every shard (and replica) and merges the answers.

A collector is named by its query socket: a local path, or ``[user@]host[:port][/path/to/gpufleet.sock]``
reached over SSH (asyncssh's direct stream to the remote Unix socket: no new listener, keys and
known_hosts as for any SSH login, and the collector's peer-credential access applies to the SSH user).
Every collector is asked at once; one that does not answer is named in one line on stderr and the others'
answers are still shown. ``--collector`` (repeatable) or ``GPUFLEET_COLLECTORS`` (comma-separated) list them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.cli.client import (
    DEFAULT_TIMEOUT,
    ApiError,
    CliError,
    CollectorUnavailable,
    decode_answer,
    request_line,
)
from gpufleet.cli.merge import HOST_OPS, merge

DEFAULT_REMOTE_SOCKET = "/run/gpufleet/gpufleet.sock"
ANSWER_LIMIT = 1 << 30  # a status answer for thousands of hosts is megabytes


@dataclass(frozen=True, slots=True)
class CollectorAddress:
    text: str  # as the user wrote it
    socket: str
    host: str | None = None  # None: a local socket
    port: int = 22
    user: str | None = None


def parse_collector(text: str) -> CollectorAddress:
    """``/run/gpufleet/gpufleet.sock``, ``c1``, ``gpufleet@c1:2222``, ``c1/run/gpufleet/gpufleet.sock``."""
    spec = text.strip()
    if not spec:
        raise CliError("--collector: empty", 2)
    if spec.startswith(("/", "./", "../", "~")):
        return CollectorAddress(spec, socket=spec)
    where, slash, path = spec.partition("/")
    user, at, hostport = where.rpartition("@")
    host, colon, port = hostport.partition(":")
    if not host or (colon and not port.isdigit()):
        raise CliError(f"--collector {text!r}: use a socket path or [user@]host[:port][/socket/path]", 2)
    return CollectorAddress(spec, socket="/" + path if slash else DEFAULT_REMOTE_SOCKET, host=host,
                            port=int(port) if colon else 22, user=user if at else None)


async def _ask(addr: CollectorAddress, request: bytes, timeout: float) -> bytes:
    if addr.host is None:
        import os

        reader, writer = await asyncio.open_unix_connection(os.path.expanduser(addr.socket),
                                                            limit=ANSWER_LIMIT)
        try:
            writer.write(request)
            await writer.drain()
            return await asyncio.wait_for(reader.readline(), timeout)
        finally:
            writer.close()
    import asyncssh

    async with asyncssh.connect(addr.host, port=addr.port, username=addr.user,
                                connect_timeout=timeout) as conn:
        sreader, swriter = await conn.open_unix_connection(addr.socket)
        swriter.write(request)
        line: bytes = await asyncio.wait_for(sreader.readline(), timeout)
        swriter.close()
        return line


class MultiBackend:
    """A :class:`~gpufleet.cli.client.Backend` over several collectors."""

    source = "live"

    def __init__(self, addresses: Sequence[CollectorAddress], *, timeout: float = DEFAULT_TIMEOUT,
                 notice: Callable[[str], None] | None = None) -> None:
        self.addresses = list(addresses)
        self.where = ", ".join(a.text for a in self.addresses)
        self.timeout = timeout
        self.notice = notice or (lambda m: print(f"gpufleet: {m}", file=sys.stderr))

    def call(self, op: str, **args: Any) -> Any:
        return asyncio.run(self._call(op, args))

    async def _one(self, addr: CollectorAddress, request: bytes) -> Any:
        try:
            data = await asyncio.wait_for(_ask(addr, request, self.timeout), self.timeout + 5)
        except (OSError, asyncio.TimeoutError, EOFError) as exc:
            raise CollectorUnavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        except Exception as exc:  # noqa: BLE001 - asyncssh's errors (auth, host key) are one line each
            raise CollectorUnavailable(f"{type(exc).__name__}: {exc}") from None
        if not data:
            raise CollectorUnavailable("closed the connection without an answer")
        return decode_answer(data, addr.text)

    async def _call(self, op: str, args: dict[str, Any]) -> Any:
        request = request_line(op, args)
        results = await asyncio.gather(*(self._one(a, request) for a in self.addresses),
                                       return_exceptions=True)
        answers: list[Any] = []
        refused: list[ApiError] = []
        for addr, res in zip(self.addresses, results, strict=True):
            if isinstance(res, ApiError):
                refused.append(res)  # e.g. "unknown host" from the shards that do not watch it
            elif isinstance(res, CliError):
                self.notice(f"collector {addr.text} did not answer: {res}")
            elif isinstance(res, BaseException):
                raise res
            else:
                answers.append(res)
        if not answers:
            if refused:
                raise refused[0]
            raise CollectorUnavailable(f"no collector answered ({self.where})")
        if refused and op not in HOST_OPS:
            self.notice(f"{len(refused)} collector(s) refused {op!r}: {refused[0]}")
        return merge(op, answers)
