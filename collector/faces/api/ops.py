"""The query API's ops: typed arguments, the dispatcher, and the handlers (store-only and live).

The op handlers that need only the store live in :class:`StoreOps`, so the CLI's read-only fallback
(collector down) answers the same ops with the same code; :class:`LiveOps` adds the live view, the alert
engine and the silences, whose permission checks ask the server's :class:`~.access.Access` policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

from gpufleet.collector.errors import QueryError, StorageError
from gpufleet.collector.faces.api import degraded
from gpufleet.collector.faces.api.access import Access, AccessDenied, Peer, this_process
from gpufleet.collector.faces.api.maintenance import MaintenanceOps, stored_table
from gpufleet.collector.faces.source import Running, StoredFleet
from gpufleet.collector.fleet import query
from gpufleet.collector.fleet.report import FORMATS, ReportFormat, WasteReport, build_report, render_report
from gpufleet.collector.model import codec
from gpufleet.collector.model.names import check_hosts, is_glob
from gpufleet.collector.model.records import (
    AlertRecord,
    EventRow,
    GpuSeries,
    JobRecord,
    ProcessSpan,
    SilenceRecord,
    UsageRow,
)
from gpufleet.collector.model.summary import by_user
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS, Thresholds, thresholds_of
from gpufleet.collector.model.views import FleetView, HostInfo
from gpufleet.collector.rules import catalog
from gpufleet.collector.units import MAX_DURATION, MAX_DURATION_TEXT

log = logging.getLogger(__name__)

API_VERSION = 1
MAX_REQUEST_BYTES = 64 * 1024
IDLE_TIMEOUT = 60.0  # a connection that sends nothing for this long is closed
WRITE_TIMEOUT = 30.0
DEFAULT_SINCE = 24 * 3600.0
MAX_POINTS_LIMIT = 10_000
STATUS_CACHE_TTL = 0.5  # seconds an unfiltered status answer is reused; 0 turns the cache off
STATUS_FORMS = ("objects", codec.ROWS_FORM, codec.USERS_FORM)
STATUS_FILTERS = ("host", "tag", "user")

Handler = Callable[["Args"], Awaitable[Any]]


# ---------------------------------------------------------------------------------------- arguments


class Args:
    """Typed access to a request's ``args``; every mistake is a :class:`QueryError` naming the argument."""

    def __init__(self, raw: Mapping[str, Any], peer: Peer | None = None) -> None:
        self.raw = raw
        self.peer = peer if peer is not None else this_process()  # who asks (in-process: ourselves)

    def _get(self, key: str, kinds: tuple[type, ...], what: str, default: Any) -> Any:
        v = self.raw.get(key)
        if v is None:
            return default
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            raise QueryError(f"bad argument {key!r}: expected {what}, got {json.dumps(v)[:40]}")
        return v

    def opt_str(self, key: str, default: str | None = None) -> str | None:
        v: str | None = self._get(key, (str,), "a string", default)
        return v

    def need_str(self, key: str) -> str:
        v = self.opt_str(key)
        if not v:
            raise QueryError(f"missing argument {key!r}")
        return v

    def str_list(self, key: str) -> list[str]:
        """A string or a list of strings (``--host a --host b``)."""
        v = self.raw.get(key)
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return list(v)
        raise QueryError(f"bad argument {key!r}: expected a string or a list of strings")

    def opt_int(self, key: str, default: int | None = None) -> int | None:
        v: int | None = self._get(key, (int,), "an integer", default)
        return v

    def opt_float(self, key: str, default: float | None = None) -> float | None:
        v = self._get(key, (int, float), "a number", default)
        return None if v is None else float(v)

    def flag(self, key: str, default: bool = False) -> bool:
        v: bool = self._get(key, (bool,), "true or false", default)
        return v

    def time_range(self, now: float) -> tuple[float, float]:
        until = self.opt_float("until", now)
        since = self.opt_float("since", None)
        assert until is not None
        start = until - DEFAULT_SINCE if since is None else since
        if not (math.isfinite(start) and math.isfinite(until)) or abs(until - now) > MAX_DURATION:
            raise QueryError(f"'since' and 'until' must be within {MAX_DURATION_TEXT} of now")
        start = max(start, until - MAX_DURATION)  # nothing is older; keeps the store's arithmetic in range
        if start >= until:
            raise QueryError("'since' must be before 'until'")
        return start, until


# ------------------------------------------------------------------------------------------ dispatch


def encode(obj: Any) -> bytes:
    """One answer as one compact JSON line (:func:`gpufleet.collector.model.codec.to_json`)."""
    return codec.to_json(obj) + b"\n"


def error_response(exc: QueryError) -> dict[str, Any]:
    """The answer to a refused request; a permission refusal says so in ``code`` (the CLI's exit code)."""
    out: dict[str, Any] = {"ok": False, "error": str(exc)}
    if isinstance(exc, AccessDenied):
        out["code"] = exc.code
    return out


async def dispatch(table: Mapping[str, Handler], request: Any, peer: Peer | None = None) -> dict[str, Any]:
    """Run one decoded request against an op table as ``peer`` (None: this process); always returns a response
    object, never raises."""
    if not isinstance(request, dict):
        return {"ok": False, "error": "request must be a JSON object"}
    v = request.get("v", API_VERSION)
    if v != API_VERSION:
        return {"ok": False, "error": f"unsupported API version {v!r} (this collector speaks {API_VERSION})"}
    op = request.get("op")
    handler = table.get(op) if isinstance(op, str) else None
    if handler is None:
        return {"ok": False, "error": f"unknown op {op!r} (known: {', '.join(sorted(table))})"}
    args = request.get("args") or {}
    if not isinstance(args, dict):
        return {"ok": False, "error": "'args' must be a JSON object"}
    try:
        return {"ok": True, "result": await handler(Args(args, peer))}
    except QueryError as exc:
        return error_response(exc)
    except StorageError as exc:  # a damaged or missing file: say so, and what still answers
        log.warning("query op %r: %s", op, exc)
        return {"ok": False, "error": degraded.op_failed(str(op), exc)}
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("query op %r failed", op)
        return {"ok": False, "error": f"internal error in {op!r}: {type(exc).__name__}: {exc}"}


# -------------------------------------------------------------------------------------------- op sets

class StoreOps:
    """Ops answered from the store alone: history, processes, usage, events, report. The fallback also uses
    the ``stored_*`` ops, which answer status/hosts/alerts from the last stored state."""

    def __init__(
        self,
        store: StoredFleet,
        *,
        known_hosts: Callable[[], Iterable[str]] | None = None,
        clock: Callable[[], float] = time.time,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.thresholds = thresholds  # the configured rules' classification (idle/busy flags in status)
        self._known = known_hosts

    async def known_hosts(self) -> set[str]:
        names = set(self._known()) if self._known else set()
        return names

    async def check_host(self, host: str) -> None:
        known = await self.known_hosts()
        if host in known:
            return
        known |= {h.name for h in await self.store.hosts()}  # a host with history but no longer configured
        check_hosts([host], known)

    async def opt_host(self, a: Args) -> str | None:
        """The optional ``host`` argument, checked like a required one when given."""
        host = a.opt_str("host")
        if host:
            await self.check_host(host)
        return host

    async def recent_resolved(self, a: Args) -> list[AlertRecord]:
        """Alerts resolved since ``since`` (default the last 24 h), for both alerts ops."""
        since = a.opt_float("since", self.clock() - DEFAULT_SINCE)
        rows = await self.store.load_alerts(active_only=False, since=since)
        return [r for r in rows if r.state == "resolved"]

    async def check_gpu(self, host: str, gpu: int) -> None:
        """``--gpu 7`` on a 4-GPU host is a typo, not an empty range: say which GPUs the host has."""
        last = (await self.store.latest(host)).get(host)
        indices = sorted({g.index for g in last.gpus}) if last else []
        if indices and gpu not in indices:
            raise QueryError(f"{host} has no GPU {gpu} (GPUs: {', '.join(map(str, indices))})")

    async def history(self, a: Args) -> dict[str, Any]:
        host = a.need_str("host")
        await self.check_host(host)
        gpu, user = a.opt_int("gpu"), a.opt_str("user")
        max_points = a.opt_int("max_points", 500)
        assert max_points is not None
        if not 1 <= max_points <= MAX_POINTS_LIMIT:
            raise QueryError(f"bad argument 'max_points': must be 1..{MAX_POINTS_LIMIT}")
        since, until = a.time_range(self.clock())
        series = await self.store.gpu_history(host, gpu=gpu, since=since, until=until, max_points=max_points)
        if gpu is not None and not series:
            await self.check_gpu(host, gpu)
        procs = await self.store.process_history(host, gpu=gpu, user=user, since=since, until=until)
        users_seen: list[str] | None = None
        if user is not None:
            used = {p.gpu_index for p in procs}
            series = [s for s in series if s.index in used]
            if not procs:  # say who did run there, not "no samples" (issue 36)
                others = await self.store.process_history(host, gpu=gpu, since=since, until=until)
                users_seen = sorted({p.user or "?" for p in others})
        usage = await self.store.usage_by_user(since=since, until=until, host=host, by_host=True, gpu=gpu)
        if user is not None:
            usage = [u for u in usage if u.user == user]
        events = await self.store.events(host=host, since=since, until=until)
        if gpu is not None:
            events = [e for e in events if e.gpu_index in (None, gpu)]
        return {
            "host": host,
            "gpu": gpu,
            "user": user,
            "since": since,
            "until": until,
            "series": series,
            "processes": procs,
            "usage": usage,
            "events": events,
            "first_sample": await self._first_sample(host, gpu, series, since),
            "users_seen": users_seen,
        }

    async def _first_sample(self, host: str, gpu: int | None, series: list[GpuSeries],
                            since: float) -> float | None:
        """When the range's samples start: a rolled-up point says only its bucket (00:00 of the hour when
        the samples start at 00:28, issue 36), so the first bucket is read again at its finest."""
        first = min((s.points[0].ts for s in series if s.points), default=None)
        step = next((s.step for s in series if s.step), None)
        if first is None or step is None:
            return first
        finer = await self.store.gpu_history(host, gpu=gpu, since=max(first, since), until=first + step,
                                             max_points=MAX_POINTS_LIMIT)
        return min((s.points[0].ts for s in finer if s.points), default=first)

    async def processes(self, a: Args) -> list[ProcessSpan]:
        host = await self.opt_host(a)
        since, until = a.time_range(self.clock())
        rows: list[ProcessSpan] = await self.store.process_history(
            host, gpu=a.opt_int("gpu"), user=a.opt_str("user"), since=since, until=until
        )
        return rows

    async def usage(self, a: Args) -> list[UsageRow]:
        host = await self.opt_host(a)
        since, until = a.time_range(self.clock())
        rows: list[UsageRow] = await self.store.usage_by_user(
            since=since, until=until, host=host, by_host=a.flag("by_host")
        )
        return rows

    async def events(self, a: Args) -> list[EventRow]:
        host = await self.opt_host(a)
        since, until = a.time_range(self.clock())
        rows: list[EventRow] = await self.store.events(host=host, since=since, until=until)
        return rows

    async def jobs(self, a: Args) -> list[JobRecord]:
        """Per-job efficiency records of the jobs that ended in the range (default: the last 7 days)."""
        now = self.clock()
        since, until = a.time_range(now) if "since" in a.raw else (now - 7 * 86400.0, now)
        limit = a.opt_int("limit", 1000) or 1000
        rows: list[JobRecord] = await self.store.jobs(since=since, until=until, user=a.opt_str("user"),
                                                      limit=max(1, min(limit, 100_000)))
        return rows

    async def report(self, a: Args) -> dict[str, Any]:
        host = await self.opt_host(a)
        fmt = a.opt_str("format", "text") or "text"
        if fmt not in FORMATS:
            raise QueryError(f"bad argument 'format': {fmt!r} (use one of {', '.join(FORMATS)})")
        since, until = a.time_range(self.clock())
        rep = await build_report(self.store, since=since, until=until, host=host)
        out: dict[str, Any] = {
            "since": since,
            "until": until,
            "host": host,
            "format": fmt,
            "text": render_report(rep, cast("ReportFormat", fmt)),
            "shard": self.shard(),  # replicas of one shard say the same: the CLI merges one per shard
        }
        if a.flag("send"):
            out["sent"] = await self.send_report(rep, fmt, a)
        return out

    def shard(self) -> str | None:
        """This collector's shard ``I/N``; None: it watches the whole fleet (or answers from a file)."""
        return None

    async def send_report(self, rep: WasteReport, fmt: str, a: Args) -> dict[str, str | None]:
        raise QueryError(
            "sending a report needs the running collector (start it with `gpufleet collector run`)"
        )

    # -- the fallback's answers from stored state
    async def stored_status(self, a: Args) -> Any:
        form = self.status_form(a)
        hosts, latest = await self.store.hosts(), await self.store.latest()
        alerts = await self.store.load_alerts(active_only=True)
        view = query.build_fleet_view_from_store(hosts, latest, alerts, now=self.clock(), **self.view_args(a))
        return self.shaped(view, form)

    async def stored_hosts(self, a: Args) -> list[HostInfo]:
        return query.host_infos_from_store(await self.store.hosts(), await self.store.latest())

    async def stored_alerts(self, a: Args) -> dict[str, Any]:
        active = await self.store.load_alerts(active_only=True)
        recent = await self.recent_resolved(a)
        silences = await self.store.list_silences(include_expired=False)
        return {"active": active, "recent": recent, "silences": silences, "muted": []}

    async def stored_silence_list(self, a: Args) -> list[SilenceRecord]:
        return await self.store.list_silences(include_expired=a.flag("include_expired"))

    async def ping(self, a: Args) -> dict[str, Any]:
        return {"pong": True, "api": API_VERSION, "source": "store"}

    def view_args(self, a: Args) -> dict[str, Any]:
        """The status view's filters as asked, and this collector's classification."""
        return {"host": a.str_list("host"), "tag": a.str_list("tag"), "user": a.str_list("user"),
                "thresholds": self.thresholds}

    @staticmethod
    def status_form(a: Args) -> str:
        form = a.opt_str("form", "objects") or "objects"
        if form not in STATUS_FORMS:
            raise QueryError(f"bad argument 'form': {form!r} (use one of {', '.join(STATUS_FORMS)})")
        return form

    @staticmethod
    def shaped(view: FleetView, form: str) -> Any:
        """The view in the asked-for form: the model itself (encoded as objects), its rows form, or its
        header with the per-user lines (``users``)."""
        if form == codec.USERS_FORM:
            return {"form": codec.USERS_FORM, "view": dataclasses.replace(view, hosts=[]),
                    "users": by_user(view)}
        return codec.fleet_view_rows(view) if form == codec.ROWS_FORM else view

    def table(self) -> dict[str, Handler]:
        """The op table of the read-only fallback."""

        async def needs_collector(a: Args) -> Any:
            raise QueryError("silences need the running collector (start it with `gpufleet collector run`)")

        return {
            "ping": self.ping,
            "status": self.stored_status,
            "hosts": self.stored_hosts,
            "history": self.history,
            "processes": self.processes,
            "usage": self.usage,
            "events": self.events,
            "jobs": self.jobs,
            "report": self.report,
            "alerts": self.stored_alerts,
            "silence_list": self.stored_silence_list,
            "silence_add": needs_collector,
            "silence_expire": needs_collector,
            **stored_table(self.store),
        }


class LiveOps(StoreOps):
    """Every op, answered from a running collector: live view and alert engine, store for history."""

    def __init__(
        self,
        collector: Running,
        *,
        access: Access | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.access = access if access is not None else Access()
        super().__init__(collector.store, known_hosts=self._live_names, clock=clock,
                         thresholds=thresholds_of(collector.config.rules))

    def _live_names(self) -> Iterable[str]:
        names = set(self.collector.live.hosts)
        names.update(h.name for h in self.collector.config.hosts)
        return names

    async def ping(self, a: Args) -> dict[str, Any]:
        c = self.collector
        now = self.clock()
        return {
            "pong": True,
            "api": API_VERSION,
            "source": "live",
            "pid": os.getpid(),
            "started_at": c.started_at,
            "uptime": now - c.started_at,
            "hosts": len(c.live.hosts),
            "config": c.config.source,
            "db": str(c.config.storage.resolved_path()),
            "stats": c.stats(),
        }

    async def status(self, a: Args) -> Any:
        form = self.status_form(a)
        view = query.build_fleet_view(self.collector.live.hosts.values(), self.collector.firing(),
                                      now=self.clock(), **self.view_args(a))
        return self.shaped(view, form)

    async def hosts(self, a: Args) -> list[HostInfo]:
        return query.host_infos(self.collector.live.hosts.values(), self.collector.store.shed_by_host)

    async def alerts(self, a: Args) -> dict[str, Any]:
        """The active alerts (the engine's, in memory) whatever the file's state; the recently resolved
        ones come from the file, and ``unreadable`` says so when it cannot be read."""
        engine = self.collector.alerts
        unreadable: dict[str, str] = {}
        try:
            recent = await self.recent_resolved(a)
        except StorageError as exc:
            recent = []
            unreadable["recent"] = degraded.unreadable("recently resolved", exc)
        active = engine.active()
        muted = [x.fingerprint for x in active if engine.is_muted(x)]
        stuck = {x.fingerprint: u for x in active if (u := engine.undelivered(x))}
        return {"active": active, "recent": recent, "silences": await engine.list_silences(), "muted": muted,
                "undelivered": stuck, "unreadable": unreadable}

    def shard(self) -> str | None:
        shard = self.collector.config.shard
        return str(shard) if shard is not None else None

    async def send_report(self, rep: WasteReport, fmt: str, a: Args) -> dict[str, str | None]:
        """Deliver through the configured notifiers now; notifier name -> None (sent) or the error."""
        self.access.check_admin(a.peer, "sending a report")
        return await self.collector.send_report(rep, cast("ReportFormat", fmt))

    async def silence_add(self, a: Args) -> SilenceRecord:
        raw = a.raw.get("matchers")
        if (
            not isinstance(raw, dict)
            or not raw
            or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items())
        ):
            raise QueryError("bad argument 'matchers': expected a non-empty object of label -> string")
        matchers = dict(raw)
        if "rule" in matchers:
            rule = catalog.rule_of(matchers["rule"])
            if not is_glob(rule) and rule not in catalog.BY_NAME:
                raise QueryError(f"unknown rule {matchers['rule']!r} (rules: {', '.join(catalog.BY_NAME)})")
            matchers["rule"] = rule
        if "host" in matchers:
            check_hosts([matchers["host"]], self._live_names())
        duration = a.opt_float("duration")
        if duration is None or duration <= 0:
            raise QueryError("bad argument 'duration': expected a positive number of seconds")
        if not duration <= MAX_DURATION:
            raise QueryError(f"bad argument 'duration': at most {MAX_DURATION_TEXT}")
        self.access.check_silence(a.peer, matchers)
        record: SilenceRecord = await self.collector.alerts.add_silence(
            matchers,
            duration,
            comment=a.opt_str("comment", "") or "",
            created_by=a.peer.name,  # who really asked; the client's 'created_by' is not believed
        )
        return record

    async def silence_list(self, a: Args) -> list[SilenceRecord]:
        rows: list[SilenceRecord] = await self.collector.alerts.list_silences(
            include_expired=a.flag("include_expired")
        )
        return rows

    async def silence_expire(self, a: Args) -> dict[str, Any]:
        sid = a.opt_int("id")
        if sid is None:
            raise QueryError("missing argument 'id'")
        active = {s.id: s for s in await self.collector.alerts.list_silences()}
        if sid not in active:
            raise QueryError(f"no active silence with id {sid}")
        self.access.check_silence(a.peer, active[sid].matchers)
        if not await self.collector.alerts.expire_silence(sid):
            raise QueryError(f"no active silence with id {sid}")
        return {"id": sid, "expired": True}

    def table(self) -> dict[str, Handler]:
        """The fallback's table with the ops that read live state or change silences."""
        return {**super().table(), "status": self.status, "hosts": self.hosts, "alerts": self.alerts,
                "silence_add": self.silence_add, "silence_list": self.silence_list,
                "silence_expire": self.silence_expire, **MaintenanceOps(self.collector, self.access).table()}

