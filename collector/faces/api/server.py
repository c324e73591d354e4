"""The query socket: a Unix listener, JSON-line framing, the status cache, and the peer check per connection.

The socket file is created at 0600 at most and only then widened to the configured mode (never wider, even
for an instant); with ``api.group`` it belongs to that group and the group may connect (0660). Every
connection's peer credentials are read once when it is accepted (:mod:`.access`), and every request is
answered under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.aioserver import close_server, close_writer
from gpufleet.collector.faces.api.access import Access, AccessDenied, Peer, peer_of, policy_for, resolve_group
from gpufleet.collector.faces.api.ops import (
    API_VERSION,
    IDLE_TIMEOUT,
    MAX_REQUEST_BYTES,
    STATUS_CACHE_TTL,
    STATUS_FILTERS,
    STATUS_FORMS,
    WRITE_TIMEOUT,
    Handler,
    LiveOps,
    dispatch,
    encode,
    error_response,
)
from gpufleet.collector.faces.source import Running

log = logging.getLogger(__name__)

def listening(path: Path) -> bool:
    """True when something accepts connections on the Unix socket at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class QueryServer:
    """Serves :class:`LiveOps` on a Unix socket created with ``mode`` (never wider, even for an instant).

    ``group`` and ``admins`` default to the collector's ``api.group`` and ``api.admins``; with a group the
    socket belongs to it and the group may connect, whatever ``mode`` says about the group bits."""

    def __init__(
        self,
        collector: Running,
        path: Path,
        mode: int = 0o600,
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        idle_timeout: float = IDLE_TIMEOUT,
        clock: Callable[[], float] = time.time,
        status_cache_ttl: float = STATUS_CACHE_TTL,
        group: str | None = None,
        admins: list[str] | None = None,
    ) -> None:
        self.collector = collector
        self.path = Path(path)
        api = collector.config.api
        self.group = group if group is not None else api.group
        self.admins = list(admins if admins is not None else api.admins)
        self.mode = mode | 0o060 if self.group else mode
        self.access: Access | None = None  # built in start(), once the socket file's group is known
        self.max_request_bytes = max_request_bytes
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._server: asyncio.AbstractServer | None = None
        self._ops: dict[str, Handler] | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._inode: int | None = None
        self._closing = False
        self._sock: socket.socket | None = None
        self.status_cache_ttl = status_cache_ttl
        self._status_cache: dict[str, tuple[float, bytes]] = {}  # form -> (built at, encoded answer)

    @property
    def ops(self) -> dict[str, Handler]:
        if self._ops is None:
            self._ops = LiveOps(self.collector, access=self._policy(), clock=self.clock).table()
        return self._ops

    def _policy(self) -> Access:
        if self.access is None:  # used in-process without start(): the socket's group is not known
            self.access = policy_for(self.mode, self.group, self.admins, None)
        return self.access

    async def handle(self, request: Any, peer: Peer | None = None) -> dict[str, Any]:
        """Answer one decoded request as ``peer`` (also usable in-process, e.g. by the demo, as the
        collector's own user)."""
        if peer is not None:
            try:
                self._policy().check_read(peer)
            except AccessDenied as exc:
                return error_response(exc)
        return await dispatch(self.ops, request, peer)

    async def answer(self, request: Any, peer: Peer | None = None) -> bytes:
        """One decoded request's encoded response line; unfiltered status answers come from the cache while
        they are younger than ``status_cache_ttl`` (one build and encode serves every screen in that time)."""
        key = _status_cache_key(request) if self.status_cache_ttl > 0 else None
        if key is None or (peer is not None and not self._policy().can_read(peer)):
            return _encode_response(await self.handle(request, peer))
        hit = self._status_cache.get(key)
        if hit is not None and 0 <= self.clock() - hit[0] < self.status_cache_ttl:
            return hit[1]
        built = self.clock()
        response = await self.handle(request, peer)
        data = _encode_response(response)
        if response.get("ok"):
            self._status_cache[key] = (built, data)
        return data

    async def start(self) -> None:
        path = self.path
        gid = resolve_group(self.group) if self.group else None
        self._make_dir(path.parent, gid)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise QueryError(f"query socket path {path} exists and is not a socket")
            if listening(path):
                raise QueryError(f"another collector is already serving {path}")
            path.unlink()  # stale socket from a collector that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # bind creates the file at 0600 at most; chmod then sets the configured mode
        try:
            sock.bind(str(path))
        except OSError as exc:
            sock.close()
            raise QueryError(f"cannot create query socket {path}: {exc.strerror or exc}") from None
        finally:
            os.umask(old)
        try:
            if gid is not None:
                os.chown(path, -1, gid)
            os.chmod(path, self.mode)
            st = path.stat()
            self._inode = st.st_ino
            self.access = policy_for(self.mode, self.group, self.admins, st.st_gid)
            self._ops = None
            sock.listen(128)
            sock.setblocking(False)
            self._closing = False
            self._sock = sock
            self._server = await asyncio.start_unix_server(
                self._serve, sock=sock, limit=self.max_request_bytes + 1
            )
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        log.info("query API listening on %s (mode %o, group %s)", path, self.mode, self.group or "-")

    @staticmethod
    def _make_dir(folder: Path, gid: int | None) -> None:
        """The socket's folder: made 0700, or 0750 and of the reader group when ``api.group`` is set (the
        group must reach the socket); an existing folder is left alone, warned about when the group cannot."""
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True, mode=0o700 if gid is None else 0o750)
            if gid is not None:
                os.chown(folder, -1, gid)
                os.chmod(folder, 0o750)
            return
        if gid is None:
            return
        st = folder.stat()
        if not (st.st_mode & 0o001 or (st.st_gid == gid and st.st_mode & 0o010)):
            log.warning("api.group: members of group %s cannot reach the socket's folder %s (mode %o): "
                        "give the group search permission on it", gid, folder, stat.S_IMODE(st.st_mode))

    async def stop(self) -> None:
        if self._server is None:
            return
        self._closing = True
        # Stop accepting first, then let connections the loop already accepted start (they see _closing and
        # end), then refuse the backlog, and only then close: a connection caught half-accepted by a closed
        # asyncio server is never closed, and its client would hang.
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        for _ in range(10):
            await asyncio.sleep(0)
        self._refuse_pending()
        await close_server(self._server, self._conns)
        self._server = None
        self._sock = None
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self._inode:  # never remove a socket another process created
                self.path.unlink()

    def _refuse_pending(self) -> None:
        """Accept and close what waits in the backlog: on Linux a client queued on a Unix listener that
        closes would otherwise hang until its own timeout instead of seeing EOF."""
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            if not self._closing:
                await self._connection(reader, writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("query connection failed")
        finally:
            if task is not None:
                self._conns.discard(task)
            await close_writer(writer)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_of(writer.get_extra_info("socket"))
        while True:
            line: bytes | None
            try:
                line = await asyncio.wait_for(reader.readline(), self.idle_timeout)
            except ValueError:  # over the StreamReader limit
                line = None
            if line is None or len(line) > self.max_request_bytes:
                too = f"request too large (limit {self.max_request_bytes} bytes)"
                await self._send(writer, {"ok": False, "error": too})
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError as exc:
                await self._send(writer, {"ok": False, "error": f"request is not valid JSON: {exc}"})
            except RecursionError:
                too_deep = "request is not valid JSON: nested too deeply"
                await self._send(writer, {"ok": False, "error": too_deep})
            else:
                await self._write(writer, await self.answer(request, peer))

    async def _send(self, writer: asyncio.StreamWriter, response: dict[str, Any]) -> None:
        await self._write(writer, _encode_response(response))

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)


def _encode_response(response: dict[str, Any]) -> bytes:
    try:
        return encode(response)
    except (TypeError, ValueError) as exc:
        log.exception("cannot encode query response")
        return encode({"ok": False, "error": f"internal error: cannot encode response: {exc}"})


def _status_cache_key(request: Any) -> str | None:
    """The form of an unfiltered status request (its cache key); None for anything else, including a status
    request with filters or with arguments this version does not know (those are always answered fresh)."""
    if not isinstance(request, dict) or request.get("op") != "status":
        return None
    if request.get("v", API_VERSION) != API_VERSION:
        return None
    args = request.get("args") or {}
    if not isinstance(args, dict) or any(args.get(k) not in (None, []) for k in STATUS_FILTERS):
        return None
    if any(k not in STATUS_FILTERS and k != "form" for k in args):
        return None
    form = args.get("form") or "objects"
    return form if form in STATUS_FORMS else None
