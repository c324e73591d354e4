"""The fleet view model behind ``gpufleet status``: pure functions from live state (or stored rows) to views.

One model, two sources: the query API builds it from the collector's :class:`LiveView`, and the CLI builds
the same model from the SQLite file when the collector is down. Renderers and ``--json`` only ever see this
model, so both paths look the same. No I/O here.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from gpufleet.collector.errors import QueryError
from gpufleet.collector.model.classify import DEFAULT_THRESHOLDS, Thresholds, gpu_state
from gpufleet.collector.model.procname import short_command
from gpufleet.collector.model.views import (
    FleetView,
    GpuView,
    HostInfo,
    HostView,
    ProcView,
    Totals,
    UserUsage,
)

#: The model's classes live in collector/model/views.py; re-exported, so their users may import them here.
__all__ = ["FleetView", "GpuView", "HostInfo", "HostView", "ProcView", "Totals", "UserUsage"]

if TYPE_CHECKING:  # annotations only: the CLI's status path must not pay for importing the store package
    import msgspec
    from gpufleet.collector.fleet.live import HostState
    from gpufleet.collector.model.records import AlertRecord
    from gpufleet.collector.model.sample import GpuSample, ProcessSample, Snapshot
    from gpufleet.collector.model.views import HostRecord

#: Rule names as the alert engine knows them -> the short flag a person reads on the status screen.
FLAG_NAMES: dict[str, str] = {
    "overheating": "hot",
    "gpu_lost": "lost",
    "orphaned_memory": "orphaned",
    "throttling": "throttled",
    "host_down": "down",
}

#: Flags that mean "held but not used": a GPU with any of them counts as wasted in ``status --by user``.
WASTE_FLAGS: frozenset[str] = frozenset({"wasted", "stale"})

FlagSource = Callable[[str, "int | None"], Iterable[str]]
_NO_FLAGS: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------------- helpers


def flag_name(rule: str) -> str:
    return FLAG_NAMES.get(rule, rule)


def natural_key(name: str) -> list[Any]:
    """n2 before n10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _known_list(names: Iterable[str], limit: int = 8) -> str:
    ordered = sorted(names, key=natural_key)
    shown = ", ".join(ordered[:limit])
    return shown + (f", ... ({len(ordered)} in all)" if len(ordered) > limit else "") if ordered else "none"


def check_hosts(patterns: Sequence[str], known: Iterable[str]) -> None:
    """Raise :class:`QueryError` for a host name (not a glob) that is not in ``known``."""
    names = set(known)
    for p in patterns:
        if not _is_glob(p) and p not in names:
            raise QueryError(f"unknown host {p!r} (known: {_known_list(names)})")


def _match_any(value: str, patterns: Sequence[str]) -> bool:
    return any(value == p or (_is_glob(p) and fnmatch.fnmatchcase(value, p)) for p in patterns)


# Positional arguments below, in the dataclasses' field order: this runs 8,000+ times per status request.


def _proc_view(p: ProcessSample, now: float) -> ProcView:
    start = p.start_time
    return ProcView(
        p.pid,
        p.user,
        short_command(p.command),
        p.gpu_memory,
        None if start is None else float(max(0, round(now - start))),
        p.state,
        p.sm_util,
        p.container,
        p.job,
        p.job_name,
        p.job_account,
        p.job_partition,
        p.job_state,
    )


def _gpu_view(g: GpuSample, flags: Iterable[str], host_up: bool, now: float, t: Thresholds) -> GpuView:
    procs = [_proc_view(p, now) for p in g.processes] if g.processes else []
    names = sorted({FLAG_NAMES.get(f, f) for f in flags}) if flags else []
    error = g.error
    state: str = gpu_state(g, t)  # idle means free capacity, as the idle rule sees it (model/classify.py)
    if error:
        if "lost" not in names:
            names.append("lost")
    elif not host_up:
        state = "unknown"
    return GpuView(
        g.index,
        g.uuid,
        g.name,
        state,
        g.util_gpu,
        g.memory_used,
        g.memory_total,
        g.temperature,
        g.power_draw,
        g.power_limit,
        error,
        g.fan_speed,  # None in a stored sample: the store keeps no fan reading
        names,
        procs,
    )


def fleet_totals(hosts: Sequence[HostView]) -> Totals:
    """The counts over ``hosts`` (also what a merged view of several collectors is counted by)."""
    t = Totals(hosts=len(hosts))
    for h in hosts:
        if h.status == "up":
            t.hosts_up += 1
        elif h.status == "down":
            t.hosts_down += 1
        else:
            t.hosts_connecting += 1
        for g in h.gpus:
            t.gpus += 1
            if g.state == "busy":
                t.busy += 1
            elif g.state == "idle":
                t.idle += 1
            elif g.state == "lost":
                t.lost += 1
            else:
                t.unknown += 1
            t.wasted += "wasted" in g.flags
            t.hot += "hot" in g.flags
            t.stale += "stale" in g.flags
            t.orphaned += "orphaned" in g.flags
    return t


def _filter(
    hosts: list[HostView], *, host: Sequence[str], tag: Sequence[str], user: Sequence[str]
) -> list[HostView]:
    if tag:
        all_tags = {t for h in hosts for t in h.tags}
        missing = [t for t in tag if not _is_glob(t) and t not in all_tags]
        if missing:
            raise QueryError(f"no host has tag {missing[0]!r} (tags: {_known_list(all_tags)})")
    if host:
        check_hosts(host, (h.name for h in hosts))
        hosts = [h for h in hosts if _match_any(h.name, host)]
    if tag:
        hosts = [h for h in hosts if any(_match_any(t, tag) for t in h.tags)]
    if user:
        kept: list[HostView] = []
        for h in hosts:
            gpus = [g for g in h.gpus if any(p.user and _match_any(p.user, user) for p in g.processes)]
            if gpus:
                h.gpus = gpus
                kept.append(h)
        hosts = kept
    return hosts


def _finish(
    hosts: list[HostView],
    now: float,
    source: str,
    *,
    host: Sequence[str],
    tag: Sequence[str],
    user: Sequence[str],
) -> FleetView:
    hosts.sort(key=lambda h: natural_key(h.name))
    hosts = _filter(hosts, host=host, tag=tag, user=user)
    samples = [h.sample_ts for h in hosts if h.sample_ts is not None]
    filters = {k: list(v) for k, v in (("host", host), ("tag", tag), ("user", user)) if v}
    return FleetView(
        generated_at=now,
        source=source,
        hosts=hosts,
        totals=fleet_totals(hosts),
        filters=filters,
        last_sample=max(samples) if samples else None,
    )


# ---------------------------------------------------------------------------------------------- builders


def build_fleet_view(
    states: Iterable[HostState],
    flags: FlagSource,
    *,
    now: float,
    host: Sequence[str] = (),
    tag: Sequence[str] = (),
    user: Sequence[str] = (),
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> FleetView:
    """The fleet view from the collector's live state; ``flags(host, gpu)`` gives firing rule names
    (``gpu=None``: alerts about the host itself)."""
    views: list[HostView] = []
    for s in states:
        up = s.status == "up"
        snap = s.snapshot
        gpus = [_gpu_view(g, flags(s.name, g.index), up, now, thresholds) for g in snap.gpus] if snap else []
        views.append(_host_view(s.name, s.status, s.reason, s.last_seen, s.tags, flags,
                                snap.ts if snap else None, gpus, now))
    return _finish(views, now, "live", host=host, tag=tag, user=user)


def _host_view(name: str, status: str, reason: str | None, last_seen: float | None, tags: Iterable[str],
               flags: FlagSource, sample_ts: float | None, gpus: list[GpuView], now: float) -> HostView:
    """One host row, live or stored: the age and the host-level flags are derived the same way."""
    return HostView(
        name=name,
        status=status,
        reason=reason,
        last_seen=last_seen,
        age=None if last_seen is None else max(0.0, now - last_seen),
        tags=list(tags),
        flags=sorted({flag_name(f) for f in flags(name, None)}),
        sample_ts=sample_ts,
        gpus=gpus,
    )


def flags_from_alerts(alerts: Iterable[AlertRecord]) -> FlagSource:
    """A flag source from stored alert records (the CLI's read-only fallback): firing alerts by host/gpu."""
    index: dict[tuple[str, str | None], set[str]] = {}
    for a in alerts:
        if a.state != "firing" or "host" not in a.labels:
            continue
        index.setdefault((a.labels["host"], a.labels.get("gpu")), set()).add(a.rule)

    def flags(host: str, gpu: int | None) -> Iterable[str]:
        return index.get((host, None if gpu is None else str(gpu)), _NO_FLAGS)

    return flags


def build_fleet_view_from_store(
    hosts: Iterable[HostRecord],
    latest: Mapping[str, Snapshot],
    alerts: Iterable[AlertRecord],
    *,
    now: float,
    host: Sequence[str] = (),
    tag: Sequence[str] = (),
    user: Sequence[str] = (),
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> FleetView:
    """The same view from stored state: last known host status, each host's last stored snapshot (the
    store's :func:`latest`, the live view's sample type), firing alerts."""
    flags = flags_from_alerts(alerts)
    views: list[HostView] = []
    seen: set[str] = set()
    for row in hosts:
        seen.add(row.name)
        snap = latest.get(row.name)
        gpus = [_gpu_view(g, flags(row.name, g.index), True, now, thresholds)
                for g in (snap.gpus if snap else ())]
        views.append(_host_view(row.name, row.status, row.reason, row.last_seen, row.tags, flags,
                                snap.ts if snap else None, gpus, now))
    for name, snap in latest.items():  # samples for a host the hosts table lacks: still show them
        if name not in seen:
            gpus = [_gpu_view(g, flags(name, g.index), True, now, thresholds) for g in snap.gpus]
            views.append(HostView(name=name, status="unknown", reason=None, last_seen=snap.ts,
                                  age=now - snap.ts, sample_ts=snap.ts, gpus=gpus))
    return _finish(views, now, "store", host=host, tag=tag, user=user)


def by_user(view: FleetView) -> list[UserUsage]:
    """GPUs held per user (a GPU shared by two users counts for both), most wasted GPUs first.

    WASTED counts the user's GPUs flagged by any waste condition (wasted, or a stale process: a zombie
    holding memory counts)."""
    acc: dict[str, dict[str, Any]] = {}
    for h in view.hosts:
        for g in h.gpus:
            users: dict[str, int] = {}
            for p in g.processes:
                u = p.user or "(unknown)"
                users[u] = users.get(u, 0) + (p.memory or 0)
                a = acc.setdefault(
                    u,
                    {
                        "gpus": set(),
                        "hosts": set(),
                        "memory": 0,
                        "wasted": set(),
                        "utils": [],
                        "longest": None,
                    },
                )
                if p.running_for is not None and (a["longest"] is None or p.running_for > a["longest"]):
                    a["longest"] = p.running_for
            for u, mem in users.items():
                a = acc[u]
                key = (h.name, g.index)
                a["gpus"].add(key)
                a["hosts"].add(h.name)
                a["memory"] += mem
                if WASTE_FLAGS.intersection(g.flags):
                    a["wasted"].add(key)
                if g.util is not None:
                    a["utils"].append(g.util)
    rows = [
        UserUsage(
            user=u,
            gpus=len(a["gpus"]),
            hosts=sorted(a["hosts"], key=natural_key),
            memory=a["memory"],
            wasted=len(a["wasted"]),
            longest=a["longest"],
            mean_util=sum(a["utils"]) / len(a["utils"]) if a["utils"] else None,
        )
        for u, a in acc.items()
    ]
    rows.sort(key=lambda r: (-r.wasted, -r.gpus, -r.memory, r.user))
    return rows


def _gpu_count(s: HostState) -> int:
    if s.snapshot:
        return len(s.snapshot.gpus)
    return len(s.hello.gpus) if s.hello else 0


def host_infos(states: Iterable[HostState], shed: Mapping[str, int] | None = None) -> list[HostInfo]:
    from gpufleet.collector.transport.wirestate import edge_facts  # collector side only

    shed = shed or {}
    out = [
        HostInfo(
            name=s.name,
            status=s.status,
            reason=s.reason,
            since=s.since,
            last_seen=s.last_seen,
            tags=list(s.tags),
            gpus=_gpu_count(s),
            agent_version=s.agent_version,
            driver_version=s.driver_version,
            backend=s.backend,
            connects=s.connects,
            reconnects=s.reconnects,
            frames=s.frames,
            bad_frames=s.bad_frames,
            lag=s.lag,
            shed=shed.get(s.name, 0),
            **edge_facts(s),
        )
        for s in states
    ]
    out.sort(key=lambda h: natural_key(h.name))
    return out


def host_infos_from_store(rows: Iterable[HostRecord], latest: Mapping[str, Snapshot]) -> list[HostInfo]:
    counts = {name: len(snap.gpus) for name, snap in latest.items()}
    out = [
        HostInfo(
            name=r.name,
            status=r.status,
            reason=r.reason,
            since=None,
            last_seen=r.last_seen,
            tags=list(r.tags),
            gpus=counts.get(r.name, 0),
            agent_version=r.agent_version,
            driver_version=r.driver_version,
        )
        for r in rows
    ]
    out.sort(key=lambda h: natural_key(h.name))
    return out


# ------------------------------------------------------------------------------------------------- JSON

_FIELDS: dict[type, tuple[str, ...]] = {}


def jsonable(obj: Any) -> Any:
    """``json.dumps(default=jsonable)``: dataclasses as dicts of their fields (like ``asdict``, without its
    deep copy, which is far too slow for a 1,000-host view), sets and tuples as lists."""
    if is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = tuple(f.name for f in fields(obj))
        return {n: getattr(obj, n) for n in names}
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


@functools.cache
def _encoder() -> msgspec.json.Encoder:
    """msgspec's encoder, in C: a 1,000-host status view in a fifth of json.dumps' time, most of a cold
    ``gpufleet status``'s wait on the collector. Imported on first use: the CLI imports this module for
    every ``status`` and never encodes."""
    import msgspec

    return msgspec.json.Encoder(enc_hook=jsonable)


def to_json(obj: Any) -> bytes:
    """``obj`` (views, records, plain values) as compact JSON: the query API's answers and the web page's
    fleet. The values of ``json.dumps(obj, default=jsonable, separators=(",", ":"))``, and its bytes but for
    three things: text outside ASCII is UTF-8 rather than ``\\u`` escapes; an exponent is written shortest
    (``1e-7``, not ``1e-07``); and NaN or infinity is null (strict JSON; json.dumps writes ``NaN``, which jq,
    JavaScript and Go refuse)."""
    try:
        return _encoder().encode(obj)
    except TypeError:  # a dict keyed by None or a bool, which msgspec refuses: json's key rules, via plain
        return _encoder().encode(plain(obj))


def plain(obj: Any) -> Any:
    """``obj`` as the JSON-shaped value ``json.loads(to_json(obj))`` would give, without the text in between
    (the read-only fallback answers in-process; the CLI's merge of several collectors): a number that is not
    finite is None there too. Here, beside :func:`jsonable`, so the CLI shapes an answer without importing
    the query server."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_plain_key(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return plain(jsonable(obj))


def _plain_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


_PROC_FIELDS = tuple(f.name for f in fields(ProcView))
_TOTALS_FIELDS = tuple(f.name for f in fields(Totals))
_GPU_FIELDS = tuple(f.name for f in fields(GpuView))
_HOST_FIELDS = tuple(f.name for f in fields(HostView))
_USER_USAGE_FIELDS = tuple(f.name for f in fields(UserUsage))
_HOST_INFO_FIELDS = tuple(f.name for f in fields(HostInfo))
assert _GPU_FIELDS[-1] == "processes" and _HOST_FIELDS[-1] == "gpus"


def _known(d: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in names}


def _proc_from(d: Mapping[str, Any]) -> ProcView:
    # Positional when the keys are exactly ours, in order (what our encoder writes): twice as fast as **d,
    # which matters at 8,000 GPUs. Otherwise by name, ignoring fields a newer collector added.
    if tuple(d) == _PROC_FIELDS:
        return ProcView(*d.values())
    return ProcView(**_known(d, _PROC_FIELDS))


def _gpu_from(d: Mapping[str, Any]) -> GpuView:
    if tuple(d) == _GPU_FIELDS:
        v = list(d.values())
        v[-1] = [_proc_from(p) for p in v[-1]]
        return GpuView(*v)
    k = _known(d, _GPU_FIELDS)
    k["processes"] = [_proc_from(p) for p in d.get("processes", [])]
    return GpuView(**k)


def _host_from(d: Mapping[str, Any]) -> HostView:
    if tuple(d) == _HOST_FIELDS:
        v = list(d.values())
        v[-1] = [_gpu_from(g) for g in v[-1]]
        return HostView(*v)
    k = _known(d, _HOST_FIELDS)
    k["gpus"] = [_gpu_from(g) for g in d.get("gpus", [])]
    return HostView(**k)


# The compact ("rows") wire form of the status view: each host, GPU and process is a JSON array in the
# order of a column list sent once, instead of an object repeating every key 8,000 times. It halves the
# bytes, and both ends skip a Python call per object (json's C encoder and decoder do all the work), which
# is most of `gpufleet status`'s time at 1,000 hosts. Only our CLI asks for it (``form: rows``); the public
# ``--json`` output stays the object form.
ROWS_FORM = "rows"
#: ``status --by user``'s form: the view's header (totals, time, source) and the per-user lines, no hosts; a
#: few KB where the rows form is 1.4 MB at 1,000 hosts, and by_user runs once on the collector.
USERS_FORM = "users"
_HOST_ROW = attrgetter(*_HOST_FIELDS[:-1])
_GPU_ROW = attrgetter(*_GPU_FIELDS[:-1])
_PROC_ROW = attrgetter(*_PROC_FIELDS)


def fleet_view_rows(view: FleetView) -> dict[str, Any]:
    """The view in the compact form :func:`fleet_view_from_dict` reads back (JSON-ready but for Totals)."""
    g_row, p_row = _GPU_ROW, _PROC_ROW
    return {
        "form": ROWS_FORM,
        "columns": {"host": _HOST_FIELDS, "gpu": _GPU_FIELDS, "proc": _PROC_FIELDS},
        "generated_at": view.generated_at,
        "source": view.source,
        "totals": view.totals,
        "filters": view.filters,
        "last_sample": view.last_sample,
        "hosts": [
            (*_HOST_ROW(h), [(*g_row(g), [p_row(p) for p in g.processes]) for g in h.gpus])
            for h in view.hosts
        ],
    }


def _hosts_from_rows(d: Mapping[str, Any]) -> list[HostView]:
    cols = d["columns"]
    hc, gc, pc = tuple(cols["host"]), tuple(cols["gpu"]), tuple(cols["proc"])
    if hc != _HOST_FIELDS or gc != _GPU_FIELDS or pc != _PROC_FIELDS:
        # another collector version: go by column name (extra columns ignored, missing ones defaulted)
        gi, pi = hc.index("gpus"), gc.index("processes")

        def gpu_dict(g: Sequence[Any]) -> dict[str, Any]:
            return {
                **dict(zip(gc, g, strict=True)),
                "processes": [dict(zip(pc, p, strict=True)) for p in g[pi]],
            }

        return [
            _host_from({**dict(zip(hc, h, strict=True)), "gpus": [gpu_dict(g) for g in h[gi]]})
            for h in d["hosts"]
        ]
    # the constructors as plain callables: a row's length is checked when it is called, not by mypy
    host: Callable[..., HostView] = HostView
    gpu_: Callable[..., GpuView] = GpuView
    proc: Callable[..., ProcView] = ProcView
    return [host(*h[:-1], [gpu_(*g[:-1], [proc(*p) for p in g[-1]]) for g in h[-1]]) for h in d["hosts"]]


def fleet_view_from_dict(d: Mapping[str, Any]) -> FleetView:
    """Rebuild the model from its JSON form (what the CLI receives over the socket), object or rows form."""
    try:
        if d.get("form") == ROWS_FORM:
            return FleetView(
                generated_at=d["generated_at"],
                source=d["source"],
                hosts=_hosts_from_rows(d),
                totals=Totals(**_known(d["totals"], _TOTALS_FIELDS)),
                filters=dict(d.get("filters", {})),
                last_sample=d.get("last_sample"),
            )
        return FleetView(
            generated_at=d["generated_at"],
            source=d["source"],
            hosts=[_host_from(h) for h in d["hosts"]],
            totals=Totals(**_known(d["totals"], _TOTALS_FIELDS)),
            filters=dict(d.get("filters", {})),
            last_sample=d.get("last_sample"),
        )
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        raise QueryError(f"malformed fleet view: {exc}") from None


def user_usage_from_dict(d: Mapping[str, Any]) -> UserUsage:
    return UserUsage(**_known(d, _USER_USAGE_FIELDS))


def host_info_from_dict(d: Mapping[str, Any]) -> HostInfo:
    """Fields a newer collector added are ignored, as in :func:`fleet_view_from_dict`."""
    return HostInfo(**_known(d, _HOST_INFO_FIELDS))
