"""The web page's model: the fleet as the CLI sees it, in a compact JSON-ready form, and the deltas between
two of them.

The page shows the same numbers as ``gpufleet status`` because it is built from the same
:func:`~gpufleet.collector.fleet.query.build_fleet_view` (same flags from the firing alerts, same classify
thresholds) and the same :func:`~gpufleet.collector.fleet.query.by_user`; this module only reshapes that view.

Shape (every value plain JSON; a GPU is an array so 8,000 of them stay small)::

    hosts:  [[name, status, reason, host flags, gpu count, last_seen (null while up), tags,
              maintenance: [by, comment, until] or null], ...]
    gpus:   {"host/index": [util, mem used MiB, mem total MiB, temp, state, flags, procs, name, held by]}
            procs: [[user, GiB held (0.1), short command or null, Slurm job / pod or null], ...]
            held by: the running Slurm job holding the GPU (``812 llama-pretrain (alice, nlp)``) or null;
            state ``unused`` when nothing runs on it (collector/model/allocation.py)
    alerts: {problem: [flags, severity, state, host(s), GPU(s), user, summary, since]}: one per problem
            (collector/model/problems.py: a job's idle peers and wasted GPUs are one, GPUs "1,2,3"); the
            page lists info ones apart and does not count them as firing
    users:  [[user, gpus held, gpus wasted now, GiB held, wasted GPU-hours over 24 h], ...]
    totals: the status view's Totals
    unreadable: [what the page could not read from the history file, and since when]  (usually empty)
    catalog: the rule catalog's flags in order with their colours, and the severities (rules/catalog.py)

A delta (:func:`diff`) carries only what changed: whole GPU arrays whose state, flags or processes
changed (always sent), ``[util, mem, temp]`` triples for readings that changed visibly (sent most-changed
first within a byte budget, the rest on a later tick), the host list or changed hosts, added/changed and
removed alerts, and users/totals when they changed. Everything here is pure and touches only its
arguments, so it runs in a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.collector.fleet import query
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model.codec import jsonable
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.problems import problems
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.model.summary import by_user
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.model.views import AllocationView, UserUsage, allocation_label, where_label
from gpufleet.collector.rules import catalog
from gpufleet.collector.service.gcpause import no_cycle_collection
from gpufleet.collector.units import GIB, MIB

MAX_USERS = 200  # rows of the waste-by-user table
# positions in a GPU array
U, M, MT, T, S, F, P, N, A = range(9)

State = dict[str, Any]


@dataclass(slots=True)
class Inputs:
    """What one model build reads, copied on the event loop (the live view is mutated there)."""

    hosts: list[HostState]
    alerts: list[AlertRecord]
    wasted_hours: dict[str, float]  # user -> wasted GPU-hours over the last 24 h (store.usage_by_user)
    now: float
    unreadable: list[str] = field(default_factory=list)  # what could not be read (api/degraded.py)


def freeze_hosts(states: Iterable[HostState]) -> list[HostState]:
    """Shallow copies: a snapshot is replaced whole on every frame, never edited, so a copy is stable."""
    out = []
    for h in states:
        c = HostState(name=h.name, status=h.status, reason=h.reason, since=h.since, last_seen=h.last_seen,
                      tags=list(h.tags), snapshot=h.snapshot, maintenance=h.maintenance)
        out.append(c)
    return out


def _mib(v: int | None) -> int | None:
    return None if v is None else v // MIB


def build_state(inp: Inputs, thresholds: Thresholds, *, show_commands: bool) -> State:
    """The page model from frozen inputs (thread-safe)."""
    with no_cycle_collection():
        return _build_state(inp, thresholds, show_commands)


def _build_state(inp: Inputs, thresholds: Thresholds, show_commands: bool) -> State:
    view = query.build_fleet_view(inp.hosts, Firing(inp.alerts), now=inp.now, thresholds=thresholds)
    hosts: list[list[Any]] = []
    gpus: dict[str, list[Any]] = {}
    for h in view.hosts:
        m = h.maintenance
        hosts.append([h.name, h.status, h.reason, h.flags, len(h.gpus),
                      None if h.status == "up" else h.last_seen, h.tags,
                      None if m is None else [m.created_by, m.comment, m.ends_at]])
        jobs = {a.job: a for a in h.allocations}
        for g in h.gpus:
            # job and pod names say what someone runs, as a command does: shown with the commands only
            procs = [[p.user or "?", round((p.memory or 0) / GIB, 1), p.command if show_commands else None,
                      where_label(p) if show_commands else (f"job {p.job}" if p.job else None)]
                     for p in g.processes]
            job = jobs.get(g.allocated_to) if g.allocated_to is not None else None
            held = None if job is None else allocation_label(job) if show_commands else \
                allocation_label(AllocationView(job.job, user=job.user, account=job.account))
            gpus[f"{h.name}/{g.index}"] = [g.util, _mib(g.mem_used), _mib(g.mem_total), g.temp, g.state,
                                           g.flags, procs, g.name, held]
    return {
        "hosts": hosts,
        "gpus": gpus,
        "alerts": _alerts(inp.alerts, show_commands),
        "users": _users(by_user(view), inp.wasted_hours),
        "totals": jsonable(view.totals),
        "show_commands": show_commands,
        "unreadable": list(inp.unreadable),
        "catalog": catalog.for_the_page(),
    }


def _alerts(alerts: Iterable[AlertRecord], show_commands: bool) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for p in problems(a for a in alerts if a.state in ("pending", "firing")):
        lead = p.lead
        # summaries name the process ("alice's python ipykernel_launcher (pid 1) holds ..."): without
        # show_commands the page says what and where, never how the process was started
        summary = lead.annotations.get("summary", "") if show_commands else ""
        fired = p.fired_at
        out[p.key] = [" ".join(p.flags), p.severity, p.state, p.hosts, p.gpus, p.user, summary,
                      fired if fired is not None else p.started_at]
    return out


def _users(rows: list[UserUsage], wasted_hours: Mapping[str, float]) -> list[list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        out[r.user] = [r.user, r.gpus, r.wasted, round(r.memory / GIB, 1), 0.0]
    for user, hours in wasted_hours.items():
        row = out.setdefault(user, [user, 0, 0, 0.0, 0.0])
        row[4] = round(hours, 2)
    ordered = sorted(out.values(), key=lambda r: (-r[2], -r[4], -r[1], r[0]))
    return ordered[:MAX_USERS]


# ---------------------------------------------------------------------------------------------- deltas

def _dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def encode_state(state: State, seq: int) -> bytes:
    with no_cycle_collection():
        return _dump({"seq": seq, **state}).encode()


def _mem_tenths(mib: int | None) -> int | None:
    """Memory as the page shows it (0.1 GiB): smaller moves are not a visible change."""
    return None if mib is None else round(mib / 102.4)


def _soft_priority(old: list[Any], new: list[Any]) -> float:
    """How visibly the readings moved (points of util / memory share / degrees); 0: not at all."""
    prio = 0.0
    if old[U] != new[U]:
        prio = max(prio, abs((old[U] or 0) - (new[U] or 0)) or 1.0)
    if old[T] != new[T]:
        prio = max(prio, abs((old[T] or 0) - (new[T] or 0)) or 1.0)
    if _mem_tenths(old[M]) != _mem_tenths(new[M]):
        total = new[MT] or 1
        prio = max(prio, abs((old[M] or 0) - (new[M] or 0)) * 100 / total, 0.5)
    return prio


def diff(sent: State, cur: State, *, soft_budget: int) -> tuple[str | None, int]:
    """See :func:`_diff`; run with the cycle collector held off, like the build."""
    with no_cycle_collection():
        return _diff(sent, cur, soft_budget=soft_budget)


def _diff(sent: State, cur: State, *, soft_budget: int) -> tuple[str | None, int]:
    """Bring ``sent`` (what every client holds) toward ``cur`` and return the delta's JSON body (without
    ``seq``), or None when nothing visible changed, plus the number of readings deferred by the budget.

    ``sent`` is updated in place with exactly what the delta carries, so a reading left out by the budget
    is still different next tick and goes then.
    """
    parts: list[str] = []
    sg, cg = sent["gpus"], cur["gpus"]
    hard: dict[str, list[Any]] = {}
    soft: list[tuple[float, str, list[Any]]] = []
    for key, new in cg.items():
        old = sg.get(key)
        if old is None or old[S] != new[S] or old[F] != new[F] or old[P] != new[P] or old[N] != new[N] \
                or old[MT] != new[MT] or old[A] != new[A]:
            hard[key] = new
            continue
        prio = _soft_priority(old, new)
        if prio > 0:
            soft.append((prio, key, new))
    gone = [k for k in sg if k not in cg]
    for key in gone:
        del sg[key]
    if hard:
        sg.update(hard)
        parts.append(f'"g":{_dump(hard)}')
    if gone:
        parts.append(f'"gr":{_dump(gone)}')
    deferred = 0
    if soft:
        soft.sort(key=lambda x: -x[0])
        used = 0
        items = []
        for _prio, key, new in soft:
            item = f"{_dump(key)}:{_dump([new[U], new[M], new[T]])}"
            if used + len(item) + 1 > soft_budget:
                deferred += 1
                continue
            used += len(item) + 1
            items.append(item)
            old = sg[key]
            old[U], old[M], old[T] = new[U], new[M], new[T]
        if items:
            parts.append('"s":{' + ",".join(items) + "}")
    if [h[0] for h in sent["hosts"]] != [h[0] for h in cur["hosts"]]:
        sent["hosts"] = cur["hosts"]
        parts.append(f'"h":{_dump(cur["hosts"])}')
    else:
        changed = {h[0]: h for h, o in zip(cur["hosts"], sent["hosts"], strict=True) if h != o}
        if changed:
            sent["hosts"] = cur["hosts"]
            parts.append(f'"hc":{_dump(changed)}')
    sa, ca = sent["alerts"], cur["alerts"]
    added = {k: v for k, v in ca.items() if sa.get(k) != v}
    removed = [k for k in sa if k not in ca]
    if added:
        parts.append(f'"a":{_dump(added)}')
    if removed:
        parts.append(f'"ar":{_dump(removed)}')
    sent["alerts"] = ca
    for key, short in (("users", "u"), ("totals", "t"), ("unreadable", "n")):
        if sent[key] != cur[key]:
            sent[key] = cur[key]
            parts.append(f'"{short}":{_dump(cur[key])}')
    return ("{" + ",".join(parts) + "}" if parts else None), deferred
