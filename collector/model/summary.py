"""What a fleet view adds up to: its totals (the status header) and its lines per user (``status --by user``).

Pure functions of the view, so a view built from live state, from the store, or merged from several
collectors' answers (the CLI) is counted the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from gpufleet.collector.model.names import natural_key
from gpufleet.collector.model.views import (
    GPU_STATES,
    UNKNOWN,
    FleetView,
    GpuState,
    HostView,
    Totals,
    UserUsage,
)
from gpufleet.collector.rules.catalog import WASTE_FLAGS


def fleet_state(sample_state: str, flags: Collection[str], host_status: str) -> GpuState:
    """The one state a GPU is counted in (views.GpuState), from its sample's state
    (:func:`~gpufleet.collector.model.classify.gpu_state`), the flags firing on it and its host's status.
    A GPU the agent could not read is lost / hung / unreadable whatever else holds; a host that is not up
    has readings that are old (unknown), or none on purpose (maintenance); a GPU a waste rule fires on is
    wasted, whether its sample is busy or not (an orphaned GPU's memory reads as allocated); a GPU a Slurm
    job holds with nothing on it is unused, before and after allocated_unused fires on it."""
    for fault in ("lost", "hung", "unreadable"):
        if sample_state == fault:
            return fault
    if host_status == "maintenance":
        return "maintenance"
    if host_status not in ("up", UNKNOWN):  # down, connecting: a store-built view keeps what it has
        return "unknown"
    if sample_state == "unused":  # a running Slurm job holds it, nothing runs on it: allocated_unused's
        return "unused"  # own state, flagged or not (its flag says since when)
    if not WASTE_FLAGS.isdisjoint(flags):
        return "wasted"
    if sample_state == "idle":
        return "idle"
    return "busy"


def fleet_totals(hosts: Sequence[HostView]) -> Totals:
    """The counts over ``hosts`` (also what a merged view of several collectors is counted by): each GPU
    once, by its state, so busy + wasted + idle + ... == gpus; and the GPUs carrying some flags."""
    status = Counter(h.status for h in hosts)
    gpus = [g for h in hosts for g in h.gpus]
    state = Counter(g.state for g in gpus)
    flags = Counter(f for g in gpus for f in set(g.flags))  # a GPU counts once per flag
    counted = {s: state[s] for s in GPU_STATES}
    counted["unknown"] += len(gpus) - sum(counted.values())  # a state a newer collector added
    return Totals(
        hosts=len(hosts), hosts_up=status["up"], hosts_down=status["down"],
        hosts_maintenance=status["maintenance"],
        hosts_connecting=len(hosts) - status["up"] - status["down"] - status["maintenance"],  # or not known
        gpus=len(gpus), busy=counted["busy"], idle=counted["idle"], lost=counted["lost"],
        unknown=counted["unknown"], wasted=counted["wasted"], unused=counted["unused"], hung=counted["hung"],
        unreadable=counted["unreadable"], maintenance=counted["maintenance"],
        hot=flags["hot"], stale=flags["stale"], orphaned=flags["orphaned"])


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
