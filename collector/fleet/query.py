"""The fleet view model behind ``gpufleet status``: pure functions from live state (or stored rows) to views.

One model, two sources: the query API builds it from the collector's :class:`LiveView`, and the CLI builds
the same model from the SQLite file when the collector is down. Renderers and ``--json`` only ever see this
model (collector/model/views.py; its JSON form is collector/model/codec.py), so both paths look the same.
No I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from gpufleet.collector.errors import QueryError
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model.allocation import uses
from gpufleet.collector.model.classify import gpu_state
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.names import check_hosts, is_glob, known_list, matches_any, natural_key
from gpufleet.collector.model.procname import short_command
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.model.sample import GpuSample, ProcessSample, Snapshot
from gpufleet.collector.model.summary import fleet_state, fleet_totals
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpufleet.collector.model.views import (
    UNKNOWN,
    AllocationView,
    FleetView,
    GpuView,
    HostInfo,
    HostRecord,
    HostView,
    ProcView,
)
from gpufleet.collector.rules.catalog import flag_name, worst_first
from gpufleet.collector.transport.wirestate import edge_facts

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
        p.pod_namespace,
        p.pod_name,
        p.container_name,
    )


def _gpu_view(g: GpuSample, flags: Iterable[str], host_status: str, now: float, t: Thresholds,
              held_by: Mapping[int, str] | None = None) -> GpuView:
    """``host_status``: the host's, for a live view; "up" for a stored one (its GPUs as last sampled).
    ``held_by``: GPU index -> the running Slurm job holding it (allocation views of the host)."""
    procs = [_proc_view(p, now) for p in g.processes] if g.processes else []
    names = worst_first({flag_name(f) for f in flags}) if flags else []  # as alerts and top list them
    error = g.error
    job = held_by.get(g.index) if held_by else None
    # idle means free capacity, as the idle rule sees it; unused: a Slurm job's, nothing on it (classify)
    sampled = gpu_state(g, t, job is not None)
    lost = flag_name("gpu_lost")
    if error and lost not in names and sampled != "unreadable":  # unreadable: the agent may not open it
        names.append(lost)
    return GpuView(
        g.index,
        g.uuid,
        g.name,
        fleet_state(sampled, names, host_status),
        g.util_gpu,
        g.memory_used,
        g.memory_total,
        g.temperature,
        g.power_draw,
        g.power_limit,
        error,
        g.fan_speed,  # None in a stored sample: the store keeps no fan reading
        names,
        job,
        g.fault if error else None,
        procs,
    )


def allocation_views(snap: Snapshot) -> list[AllocationView]:
    """The host's running Slurm jobs and their GPUs, used or not (model/allocation.py decides)."""
    out = []
    for u in uses(snap):
        a = u.allocation
        out.append(AllocationView(a.job, a.name, a.user, a.account, a.partition, list(u.allocated),
                                  list(u.used), list(u.unused)))
    return out


def _held_by(allocations: Sequence[AllocationView]) -> dict[int, str]:
    """GPU index -> the job holding it (the first, where Slurm shares a GPU between jobs)."""
    out: dict[int, str] = {}
    for a in allocations:
        for i in a.gpus:
            out.setdefault(i, a.job)
    return out


def _filter(
    hosts: list[HostView], *, host: Sequence[str], tag: Sequence[str], user: Sequence[str]
) -> list[HostView]:
    if tag:
        all_tags = {t for h in hosts for t in h.tags}
        missing = [t for t in tag if not is_glob(t) and t not in all_tags]
        if missing:
            raise QueryError(f"no host has tag {missing[0]!r} (tags: {known_list(all_tags)})")
    if host:
        check_hosts(host, (h.name for h in hosts))
        hosts = [h for h in hosts if matches_any(h.name, host)]
    if tag:
        hosts = [h for h in hosts if any(matches_any(t, tag) for t in h.tags)]
    if user:
        kept: list[HostView] = []
        for h in hosts:
            # the user's processes, and the GPUs the user's Slurm jobs hold (used or not)
            jobs = {a.job for a in h.allocations if a.user and matches_any(a.user, user)}
            gpus = [g for g in h.gpus if any(p.user and matches_any(p.user, user) for p in g.processes)
                    or g.allocated_to in jobs]
            if gpus:
                h.gpus = gpus
                h.allocations = [a for a in h.allocations if a.job in jobs]
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
    firing: Firing,
    *,
    now: float,
    host: Sequence[str] = (),
    tag: Sequence[str] = (),
    user: Sequence[str] = (),
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> FleetView:
    """The fleet view from the collector's live state; ``firing`` says which rules fire where."""
    views: list[HostView] = []
    for s in states:
        snap = s.snapshot
        allocations = allocation_views(snap) if snap is not None and s.status == "up" else []
        held_by = _held_by(allocations)
        gpus = [_gpu_view(g, firing.on(s.name, g.index), s.status, now, thresholds, held_by)
                for g in snap.gpus] if snap else []
        view = _host_view(s.name, s.status, s.reason, s.last_seen, s.tags, firing, snap.ts if snap else None,
                          gpus, now)
        view.allocations = allocations
        if s.maintenance is not None and s.status == "maintenance":
            view.maintenance = s.maintenance
        views.append(view)
    return _finish(views, now, "live", host=host, tag=tag, user=user)


def _host_view(name: str, status: str, reason: str | None, last_seen: float | None, tags: Iterable[str],
               firing: Firing, sample_ts: float | None, gpus: list[GpuView], now: float) -> HostView:
    """One host row, live or stored: the age and the host-level flags are derived the same way."""
    return HostView(
        name=name,
        status=status,
        reason=reason,
        last_seen=last_seen,
        age=None if last_seen is None else max(0.0, now - last_seen),
        tags=list(tags),
        flags=worst_first({flag_name(f) for f in firing.on(name, None)}),
        sample_ts=sample_ts,
        gpus=gpus,
    )


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
    firing = Firing(alerts)
    views: list[HostView] = []
    seen: set[str] = set()
    for row in hosts:
        seen.add(row.name)
        snap = latest.get(row.name)
        gpus = [_gpu_view(g, firing.on(row.name, g.index), "up", now, thresholds)
                for g in (snap.gpus if snap else ())]
        views.append(_host_view(row.name, row.status, row.reason, row.last_seen, row.tags, firing,
                                snap.ts if snap else None, gpus, now))
    for name, snap in latest.items():  # samples for a host the hosts table lacks: still show them
        if name not in seen:
            gpus = [_gpu_view(g, firing.on(name, g.index), "up", now, thresholds) for g in snap.gpus]
            views.append(HostView(name=name, status=UNKNOWN, reason=None, last_seen=snap.ts,
                                  age=now - snap.ts, sample_ts=snap.ts, gpus=gpus))
    return _finish(views, now, "store", host=host, tag=tag, user=user)


def _gpu_count(s: HostState) -> int:
    if s.snapshot:
        return len(s.snapshot.gpus)
    return len(s.hello.gpus) if s.hello else 0


def _info(r: HostRecord, since: float | None, gpus: int) -> HostInfo:
    """A ``hosts`` line's identity part, live or stored alike."""
    return HostInfo(r.name, r.status, r.reason, since, r.last_seen, list(r.tags), gpus, r.agent_version,
                    r.driver_version)


def host_infos(states: Iterable[HostState], shed: Mapping[str, int] | None = None) -> list[HostInfo]:
    shed = shed or {}
    out = [dataclasses.replace(_info(s.record(), s.since, _gpu_count(s)), backend=s.backend,
                               connects=s.connects, reconnects=s.reconnects, frames=s.frames,
                               bad_frames=s.bad_frames, lag=s.lag, shed=shed.get(s.name, 0), **edge_facts(s),
                               maintenance=s.maintenance if s.status == "maintenance" else None)
           for s in states]
    out.sort(key=lambda h: natural_key(h.name))
    return out


def host_infos_from_store(rows: Iterable[HostRecord], latest: Mapping[str, Snapshot]) -> list[HostInfo]:
    counts = {name: len(snap.gpus) for name, snap in latest.items()}
    out = [_info(r, None, counts.get(r.name, 0)) for r in rows]
    out.sort(key=lambda h: natural_key(h.name))
    return out
