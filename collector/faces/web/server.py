"""The collector's read-only web page: one HTML page, its JSON endpoints, and one live stream per page.

Why a hand-rolled asyncio server and not aiohttp: the page needs GET only (a page, two static files, three
JSON endpoints and a server-sent-events stream), which the collector already serves this way for /metrics
(collector/faces/metrics/exporter.py: bounded request heads, timeouts, connection cap). aiohttp would bring a
C-extension dependency tree (multidict, yarl, frozenlist, aiosignal, propcache) into a service that otherwise
needs none for HTTP, for features (routing DSL, websockets, request bodies) the page does not use. TLS and
basic auth are left to a reverse proxy (deploy/OPERATOR.md), which does them better than we would.

Live updates: a :class:`Broadcaster` builds the page model (collector/faces/web/model.py) once per tick for
all pages, in a worker thread from a cheap copy taken on the event loop, diffs it against what the pages hold
and sends the same delta to every stream. Readings that changed go within a byte budget per tick (most
changed first; the rest on a later tick), so the stream stays small at 1,000 hosts. A page whose stream
cannot keep up (its queue of events fills, or a write stalls) is dropped; its EventSource reconnects and
starts again from a full state. Nothing runs when no page is open.

Endpoints: ``/`` the page; ``/static/app.js``, ``/static/app.css``; ``/api/state`` the page model;
``/api/status`` the fleet view exactly as ``gpufleet status --json`` gives it; ``/api/history?host=&gpu=
&range=15m|1h|24h|30d`` a GPU's util and memory (every raw sample up to an hour, rollups beyond);
``/api/fleet?range=`` the GPUs busy, wasted, idle and lost over the range (collector/faces/web/fleetchart.py);
``/api/stream`` the live stream.
With ``web.token`` set every request needs it: ``Authorization: Bearer <token>``, or ``?token=<token>``
once (answered with a cookie and a redirect that drops the token from the address bar).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from gpufleet.collector.errors import StorageError
from gpufleet.collector.faces.aioserver import HttpServer, InThread
from gpufleet.collector.faces.api import degraded
from gpufleet.collector.faces.source import Running
from gpufleet.collector.faces.web import fleetchart, model
from gpufleet.collector.faces.web.http import HttpError, Request, respond, response_head
from gpufleet.collector.fleet import query
from gpufleet.collector.model.codec import to_json
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.settings import WebConfig
from gpufleet.collector.units import MIB

log = logging.getLogger(__name__)

RANGES = {"15m": 900.0, "1h": 3600.0, "24h": 86400.0, "30d": 30 * 86400.0}
HISTORY_POINTS = 360
#: up to an hour the page draws every raw sample (1 s, or 2 a second at the fastest interval), not the
#: 1-minute means that flattened an input-bound sawtooth (issue 36)
RAW_RANGE = 3600.0
RAW_POINTS = 7200
FLEET_POINTS = 120  # points of the fleet chart
FLEET_CACHE = 15.0  # seconds a fleet chart is reused (it reads every host's history)
COOKIE = "gpufleet_token"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
USAGE_REFRESH = 60.0  # seconds between reads of the 24 h waste per user from the store
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
          "index.html": "text/html; charset=utf-8"}


def _asset(name: str) -> bytes:
    return resources.files("gpufleet.collector.faces.web").joinpath("static", name).read_bytes()


class Client:
    """One open stream: a bounded queue of encoded events; ``None`` in it ends the stream."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(size)
        self.dropped = False

    def offer(self, event: bytes) -> bool:
        """Queue an event; a client that let its queue fill is dropped (False)."""
        if self.dropped:
            return False
        try:
            self.queue.put_nowait(event)
            return True
        except asyncio.QueueFull:
            self.drop()
            return False

    def drop(self) -> None:
        self.dropped = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


def sse(kind: str, seq: int, data: bytes) -> bytes:
    return b"event: %s\nid: %d\ndata: %s\n\n" % (kind.encode(), seq, data)


class Broadcaster:
    """Builds the page model for every open stream at once and sends each the same deltas."""

    def __init__(self, source: Running, web: WebConfig, *, in_thread: InThread, interval: float = 1.0,
                 soft_budget: int = 30_000, queue_size: int = 16,
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.in_thread = in_thread  # where builds run: the web server's own threads (HttpServer.in_thread)
        self.web = web
        self.interval = interval
        self.soft_budget = soft_budget  # bytes of changed readings per tick (structure always goes)
        self.queue_size = queue_size
        self.clock = clock
        self.thresholds = thresholds_of(source.config.rules)
        self.clients: set[Client] = set()
        self.sent: model.State | None = None  # what every open page holds
        self.seq = 0
        self._full: tuple[int, bytes] | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._wasted: dict[str, float] = {}
        self._wasted_at = -USAGE_REFRESH
        self._unreadable: list[str] = []  # the history read that failed, said on the page
        self.stats: dict[str, float] = {"events": 0, "bytes": 0, "dropped": 0, "deferred": 0,
                                        "tick_ms_max": 0.0}

    async def inputs(self) -> model.Inputs:
        """Copy what a build reads (on the loop); the store's 24 h waste per user once a minute."""
        now = self.clock()
        if now - self._wasted_at >= USAGE_REFRESH:
            self._wasted_at = now
            try:
                rows = await self.source.store.usage_by_user(since=now - 86400, until=now)
                wasted: dict[str, float] = {}
                for r in rows:
                    if r.gpu_hours_wasted > 0:
                        wasted[r.user] = wasted.get(r.user, 0.0) + r.gpu_hours_wasted
                self._wasted, self._unreadable = wasted, []
            except StorageError as exc:  # the live part shows without it, and the page says so
                self._unreadable = [degraded.unreadable("wasted GPU-hours (24 h)", exc)]
                log.warning("web: %s", exc)
            except Exception:  # noqa: BLE001 - the page shows the live part without it
                log.warning("web: reading waste by user from the store failed", exc_info=True)
        try:  # copies: the engine updates its records in place while the build runs in a thread
            alerts = [copy.copy(a) for a in self.source.alerts.active()]
        except RuntimeError:  # collector not started (yet)
            alerts = []
        return model.Inputs(model.freeze_hosts(self.source.live.hosts.values()), alerts, dict(self._wasted),
                            now, list(self._unreadable))

    async def current(self) -> model.State:
        inp = await self.inputs()
        return await self.in_thread(functools.partial(model.build_state, inp, self.thresholds,
                                                      show_commands=self.web.show_commands))

    async def join(self, max_clients: int) -> tuple[Client, bytes] | None:
        """A new stream and its first event (the full state the deltas then apply to); None when
        ``max_clients`` streams are open already."""
        async with self._lock:
            if len(self.clients) >= max_clients:
                return None
            if self.sent is None or not self.clients:
                self.sent = await self.current()  # nobody holds the old one: start afresh
                self.seq += 1
                self._full = None
            if self._full is None or self._full[0] != self.seq:
                sent, seq = self.sent, self.seq
                self._full = (seq, await self.in_thread(model.encode_state, sent, seq))
            client = Client(self.queue_size)
            self.clients.add(client)
            first = sse("full", self.seq, self._full[1])
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="web-broadcast")
        return client, first

    def leave(self, client: Client) -> None:
        self.clients.discard(client)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while self.clients:
            due += self.interval  # a steady rate: the build's own time does not stretch the interval
            await asyncio.sleep(max(0.0, due - loop.time()))
            try:
                await self.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not end the stream for everyone
                log.exception("web: building the live update failed")
            due = max(due, loop.time() - self.interval)  # fell behind: carry on, no burst to catch up

    async def tick(self) -> None:
        async with self._lock:
            if self.sent is None:
                return
            started = time.perf_counter()
            cur = await self.current()
            body, deferred = await self.in_thread(
                functools.partial(model.diff, self.sent, cur, soft_budget=self.soft_budget))
            self.stats["deferred"] = deferred
            self.stats["tick_ms_max"] = max(self.stats["tick_ms_max"], (time.perf_counter() - started) * 1000)
            if body is None:
                return
            self.seq += 1
            event = sse("delta", self.seq, body.encode())
            self.stats["events"] += 1
            self.stats["bytes"] += len(event)
            for c in list(self.clients):
                if not c.offer(event):
                    self.stats["dropped"] += 1
                    self.clients.discard(c)

    async def stop(self) -> None:
        for c in list(self.clients):
            c.drop()
        self.clients.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


class WebServer(HttpServer):
    """Serves the page on ``web.listen``; ``stop()`` closes every connection, streams included."""

    what = "web page"

    def __init__(self, source: Running, web: WebConfig, *, read_timeout: float = 5.0,
                 write_timeout: float = 10.0, max_header_bytes: int = 16384, heartbeat: float = 15.0,
                 interval: float = 1.0, soft_budget: int = 30_000) -> None:
        # streams, plus room for page loads and API calls
        super().__init__(web.listen, "web.listen", read_timeout=read_timeout, write_timeout=write_timeout,
                         max_header_bytes=max_header_bytes, max_connections=web.max_clients + 32)
        self.source = source
        self.web = web
        self.heartbeat = heartbeat
        self.broadcaster = Broadcaster(source, web, interval=interval, soft_budget=soft_budget,
                                       in_thread=self.in_thread)
        self._assets = {name: _asset(name) for name in STATIC}
        self._cookie = (hmac.new(web.token.encode(), b"gpufleet-web-cookie", hashlib.sha256).hexdigest()
                        if web.token else None)
        self._builds = asyncio.Semaphore(2)  # JSON builds at once (~0.1 s each at 8,000 GPUs)
        self._fleet: dict[str, tuple[float, bytes]] = {}  # range -> (when built, the fleet chart's JSON)

    def _listening_note(self) -> str:
        return " (token required)" if self.web.token else ""

    async def stop(self) -> None:
        await self.broadcaster.stop()
        await super().stop()

    # -------------------------------------------------------------------------------------- requests

    async def _text(self, writer: asyncio.StreamWriter, status: int, text: str,
                    extra: Sequence[tuple[str, str]] = ()) -> None:
        await respond(writer, status, (text + "\n").encode(), "text/plain; charset=utf-8",
                      timeout=self.write_timeout, extra=extra)

    async def _json(self, writer: asyncio.StreamWriter, body: bytes, head_only: bool = False) -> None:
        await respond(writer, 200, body, "application/json", timeout=self.write_timeout, head_only=head_only)

    def _authorized(self, req: Request) -> bool:
        token = self.web.token
        if not token or self._cookie is None:
            return True
        auth = req.headers.get("authorization", "")
        offered = [auth[7:].strip() if auth.lower().startswith("bearer ") else "", req.query.get("token", "")]
        if any(o and hmac.compare_digest(o.encode(), token.encode()) for o in offered):
            return True
        cookie = req.cookie(COOKIE) or ""
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self._cookie.encode())

    def _host_ok(self, req: Request) -> bool:
        """On a loopback address, only loopback names in ``Host``: a web site the user visits cannot
        rebind its own name to 127.0.0.1 and read the page (DNS rebinding). A proxy that keeps nginx's
        default ``Host`` (the upstream, 127.0.0.1:PORT) passes."""
        if self._host not in LOOPBACK_NAMES:
            return True
        host = req.headers.get("host", "")
        if not host:
            return True  # not a browser (every browser sends Host)
        name = host[1:host.find("]")] if host.startswith("[") else host.rpartition(":")[0] or host
        return name.lower() in LOOPBACK_NAMES

    async def _route(self, req: Request, writer: asyncio.StreamWriter) -> None:
        if not self._host_ok(req):
            await self._text(writer, 403, "this page answers to 127.0.0.1 and localhost only (web.listen "
                             "is a loopback address)")
            return
        if req.method not in ("GET", "HEAD"):
            await self._text(writer, 405, "read-only: GET only", extra=(("Allow", "GET, HEAD"),))
            return
        if not self._authorized(req):
            await self._text(writer, 401, "a token is required: open the page as /?token=<token> or send "
                             "'Authorization: Bearer <token>'", extra=(("WWW-Authenticate", "Bearer"),))
            return
        head_only = req.method == "HEAD"
        if "token" in req.query and self._cookie is not None and req.path in ("/", "/index.html"):
            # remember it in a cookie (a hash of the token, never the token) and drop it from the URL
            cookie = f"{COOKIE}={self._cookie}; Path=/; HttpOnly; SameSite=Strict"
            writer.write(response_head(303, "text/plain", 0, (("Location", req.path or "/"),
                                                              ("Set-Cookie", cookie))))
            await asyncio.wait_for(writer.drain(), self.write_timeout)
            return
        path = req.path
        if path in ("/", "/index.html"):
            await respond(writer, 200, self._assets["index.html"], STATIC["index.html"],
                          timeout=self.write_timeout, head_only=head_only)
        elif path.startswith("/static/") and path[len("/static/"):] in ("app.js", "app.css"):
            name = path[len("/static/"):]
            await respond(writer, 200, self._assets[name], STATIC[name], timeout=self.write_timeout,
                          head_only=head_only)
        elif path == "/api/state":
            async with self._builds:
                state = await self.broadcaster.current()
                body = await self.in_thread(model.encode_state, state, self.broadcaster.seq)
            await self._json(writer, body, head_only)
        elif path == "/api/status":
            async with self._builds:
                body = await self._status()
            await self._json(writer, body, head_only)
        elif path == "/api/history":
            await self._json(writer, await self._history(req), head_only)
        elif path == "/api/fleet":
            await self._json(writer, await self._fleet_chart(req), head_only)
        elif path == "/api/stream" and head_only:
            writer.write(response_head(200, "text/event-stream", None))
            await asyncio.wait_for(writer.drain(), self.write_timeout)
        elif path == "/api/stream":
            await self._stream(writer)
        else:
            await self._text(writer, 404, "not found")

    async def _status(self) -> bytes:
        """The fleet view as the query API's ``status`` op answers it (the CLI's ``--json``)."""
        inp = await self.broadcaster.inputs()
        show = self.web.show_commands
        thresholds = self.broadcaster.thresholds

        def build() -> bytes:
            view = query.build_fleet_view(inp.hosts, Firing(inp.alerts), now=inp.now, thresholds=thresholds)
            if not show:
                for h in view.hosts:
                    for g in h.gpus:
                        for p in g.processes:
                            p.command = None
            return to_json(view)

        return await self.in_thread(build)

    async def _history(self, req: Request) -> bytes:
        host, gpu_s, rng = req.query.get("host", ""), req.query.get("gpu", ""), req.query.get("range", "1h")
        if host not in self.source.live.hosts:
            raise HttpError(404, f"unknown host {host!r}")
        if not gpu_s.isdigit():
            raise HttpError(400, "gpu must be a GPU index")
        if rng not in RANGES:
            raise HttpError(400, f"range must be one of {', '.join(RANGES)}")
        now = time.time()
        most = RAW_POINTS if RANGES[rng] <= RAW_RANGE else HISTORY_POINTS
        try:
            series = await self.source.store.gpu_history(host, gpu=int(gpu_s), since=now - RANGES[rng],
                                                         until=now, max_points=most)
        except StorageError as exc:  # the page shows this text where the chart would be
            raise HttpError(503, degraded.unreadable("this GPU's history", exc)) from exc
        out: dict[str, Any] = {"host": host, "gpu": int(gpu_s), "range": rng, "since": now - RANGES[rng],
                               "until": now, "series": None}
        if series:
            s = series[0]
            mib = float(MIB)
            points = [[p.ts, p.util_mean, None if p.mem_used_mean is None else round(p.mem_used_mean / mib)]
                      for p in s.points]
            out["series"] = {
                "resolution": s.resolution, "step": s.step, "name": s.name,
                "memory_total": None if s.memory_total is None else s.memory_total // MIB,
                "points": points,
            }
        return json.dumps(out, separators=(",", ":")).encode()

    async def _fleet_chart(self, req: Request) -> bytes:
        """The GPUs busy, wasted, idle and lost over the range: each GPU's history (the store's
        fleet_history) and the waste alerts' firing times, the stored ones and the engine's."""
        rng = req.query.get("range", "1h")
        if rng not in RANGES:
            raise HttpError(400, f"range must be one of {', '.join(RANGES)}")
        now = time.time()
        cached = self._fleet.get(rng)
        if cached is not None and now - cached[0] < FLEET_CACHE:
            return cached[1]
        since = now - RANGES[rng]
        store = self.source.store
        try:
            series = await store.fleet_history(since=since, until=now, max_points=FLEET_POINTS)
            stored = await store.load_alerts(active_only=False, since=since)
        except StorageError as exc:
            raise HttpError(503, degraded.unreadable("the fleet's history", exc)) from exc
        try:
            active = {a.fingerprint: a for a in self.source.alerts.active()}
        except RuntimeError:  # the engine is not started
            active = {}
        alerts = [active.pop(a.fingerprint, a) for a in stored] + list(active.values())
        thresholds = self.broadcaster.thresholds

        def build() -> bytes:
            chart = fleetchart.fleet_states(series, alerts, since=since, until=now, points=FLEET_POINTS,
                                            thresholds=thresholds)
            return json.dumps({"range": rng, **chart}, separators=(",", ":")).encode()

        body = await self.in_thread(build)
        self._fleet[rng] = (now, body)
        return body

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        b = self.broadcaster
        joined = await b.join(self.web.max_clients)
        if joined is None:
            await self._text(writer, 503, f"too many live pages (web.max_clients: {self.web.max_clients})")
            return
        client, first = joined
        try:
            writer.write(response_head(200, "text/event-stream", None, (("X-Accel-Buffering", "no"),)))
            writer.write(b"retry: 2000\n\n" + first)
            await asyncio.wait_for(writer.drain(), self.write_timeout)
            while True:
                try:
                    event = await asyncio.wait_for(client.queue.get(), self.heartbeat)
                except asyncio.TimeoutError:
                    event = b": keep-alive\n\n"
                if event is None:
                    return  # dropped (too slow) or the server stops
                writer.write(event)
                await asyncio.wait_for(writer.drain(), self.write_timeout)
        except asyncio.TimeoutError:
            b.stats["dropped"] += 1  # a write stalled: the page reconnects and starts from a full state
        finally:
            b.leave(client)
