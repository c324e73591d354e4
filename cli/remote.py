"""Several collectors as one backend: the CLI asks every shard (and replica) and merges the answers.

A collector is named by its query socket: a local path, or ``[user@]host[:port][/path/to/gpufleet.sock]``
reached over SSH (asyncssh's direct stream to the remote Unix socket: no new listener, keys and
known_hosts as for any SSH login, and the collector's peer-credential access applies to the SSH user).
Every collector is asked at once, each in its own thread (a blocking socket, or asyncssh in its own loop),
before the command imports its renderer; one that does not answer is named in one line on stderr and the
others' answers are still shown. ``--collector`` (repeatable), ``GPUFLEET_COLLECTORS`` (comma-separated)
or the CLI config's ``collectors:`` list them (:mod:`gpufleet.collector.addresses` parses each).
"""

from __future__ import annotations

import asyncio
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpufleet.cli.client import (
    DEFAULT_TIMEOUT,
    ApiClient,
    ApiError,
    CliError,
    CollectorUnavailable,
    decode_answer,
    request_line,
)
from gpufleet.cli.merge import collector_args, host_scoped, merge, merge_status_views
from gpufleet.collector.addresses import CollectorAddress
from gpufleet.collector.errors import CollectorError
from gpufleet.collector.model.codec import fleet_view_from_dict
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.model.views import FleetView


def _exchange(addr: CollectorAddress, op: str, request: bytes, timeout: float) -> bytes:
    """One answer line from one collector (blocking: each collector is asked in its own thread)."""
    if addr.host is None:
        client = ApiClient(os.path.expanduser(addr.socket), timeout=timeout)
        try:
            client.connect()
            return client.exchange_line(request, op)
        finally:
            client.close()
    try:
        return asyncio.run(asyncio.wait_for(_ask_ssh(addr, request, timeout), timeout + 5))
    except (OSError, asyncio.TimeoutError, EOFError) as exc:
        raise CollectorUnavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001 - asyncssh's errors (auth, host key) are one line each
        raise CollectorUnavailable(f"{type(exc).__name__}: {exc}") from None


async def _ask_ssh(addr: CollectorAddress, request: bytes, timeout: float) -> bytes:
    from gpufleet.collector.transport.sshlib import asyncssh  # only for a collector over SSH: 0.15 s to load

    options: dict[str, Any] = {}
    if addr.key is not None:
        options["client_keys"] = [addr.key]
    if addr.known_hosts is not None:
        options["known_hosts"] = addr.known_hosts
    async with asyncssh.connect(addr.host, port=addr.port, username=addr.user, connect_timeout=timeout,
                                **options) as conn:
        sreader, swriter = await conn.open_unix_connection(addr.socket)
        swriter.write(request)
        line: bytes = await asyncio.wait_for(sreader.readline(), timeout)
        swriter.close()
        return line


_T = TypeVar("_T")
class _Stored:
    """An answer from a stopped worker's database (already JSON-shaped, no line to decode)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


#: (which collector, its answer line, its database's answer, or why there is none)
_Answer = tuple[int, "bytes | _Stored | BaseException"]


class MultiBackend:
    """A :class:`~gpufleet.cli.client.Backend` over several collectors."""

    source = "live"
    merged = True

    def __init__(self, addresses: Sequence[CollectorAddress], *, timeout: float = DEFAULT_TIMEOUT,
                 notice: Callable[[str], None] | None = None, thresholds: Thresholds | None = None) -> None:
        self.addresses = list(addresses)
        self.thresholds = thresholds  # for a stopped worker's database, classified as the collector does
        self.where = ", ".join(a.text for a in self.addresses)
        self.timeout = timeout
        self.notice = notice or (lambda m: print(f"gpufleet: {m}", file=sys.stderr))

    def call(self, op: str, **args: Any) -> Any:
        answers = self._ask_all(op, collector_args(op, args))(lambda result: result)
        return merge(op, answers, args)

    def status_view(self, **args: Any) -> FleetView:
        return self.status_later(**args)()

    def status_later(self, **args: Any) -> Callable[[], FleetView]:
        """Ask every collector for status now; the returned call gives the merged model itself (each
        answer rebuilt as it arrives, while the others are still on the way; no JSON in between). Ask in
        the rows form (``form: rows``): half the bytes, and the fastest to rebuild."""
        collect = self._ask_all("status", args)

        def finish() -> FleetView:
            views = collect(fleet_view_from_dict)
            return views[0] if len(views) == 1 else merge_status_views(views)

        return finish

    def _ask_all(self, op: str, args: dict[str, Any]) -> Callable[[Callable[[Any], _T]], list[_T]]:
        """Ask every collector at once (a thread each: the socket waits release the GIL, and the caller
        goes on with its imports meanwhile); the returned call collects the answers, each through
        ``convert`` as it arrives, in the order the collectors were named. One that does not answer is
        named on stderr and left out."""
        request = request_line(op, args)
        done: queue.SimpleQueue[_Answer] = queue.SimpleQueue()

        def ask(i: int, addr: CollectorAddress) -> None:
            try:
                done.put((i, _exchange(addr, op, request, self.timeout)))
            except CollectorUnavailable as exc:
                done.put((i, self._stored(addr, op, args, exc)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                done.put((i, exc))

        for i, addr in enumerate(self.addresses):
            threading.Thread(target=ask, args=(i, addr), daemon=True).start()
        return lambda convert: self._collect(op, args, done, convert)

    def _stored(self, addr: CollectorAddress, op: str, args: dict[str, Any],
                why: CollectorUnavailable) -> _Stored | BaseException:
        """A worker that does not answer: its database, read-only, as for the one collector (the notice
        says so); ``why`` when it has none."""
        if addr.db is None or not os.path.isfile(addr.db):
            return why
        from gpufleet.cli.fallback import StoreFallback  # asyncio, aiosqlite, the store: only now

        try:
            fallback = StoreFallback(addr.db, thresholds=self.thresholds,
                                     notice=lambda m: self.notice(f"{addr.text}: {m}"))
            return _Stored(fallback.call(op, **args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            return exc

    def _collect(self, op: str, args: dict[str, Any], done: queue.SimpleQueue[_Answer],
                 convert: Callable[[Any], _T]) -> list[_T]:
        results: dict[int, _T | BaseException] = {}
        for _ in self.addresses:
            i, got = done.get()
            if isinstance(got, _Stored):
                try:
                    results[i] = convert(got.value)
                except (CliError, CollectorError) as exc:
                    results[i] = exc
            elif not isinstance(got, bytes):
                results[i] = got
            elif not got:
                results[i] = CollectorUnavailable("closed the connection without an answer")
            else:
                try:  # decode this one while the others are still arriving
                    results[i] = convert(decode_answer(got, self.addresses[i].text))
                except (CliError, CollectorError) as exc:
                    results[i] = exc
        answers: list[_T] = []
        refused: list[ApiError] = []
        for i, addr in enumerate(self.addresses):
            res = results[i]
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
        if refused and not host_scoped(op, args):
            self.notice(f"{len(refused)} collector(s) refused {op!r}: {refused[0]}")
        return answers
