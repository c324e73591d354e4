"""The front page's fleet chart: how many GPUs were busy, wasted, idle or lost over a range (issue 36).

Counted the way the fleet line counts now (collector/model/summary.py fleet_state), from what history keeps:
each GPU's readings per point (the store's ``fleet_history``: gpu_history host by host) say idle (nothing
allocated: :func:`~gpufleet.collector.model.classify.free_reading`), busy, or lost (no readings: the agent
could not read it); a GPU a waste rule fired on during the point is wasted, from the alerts' own firing
and resolving times. A GPU with no point (its host down, not yet seen) is not counted then. Pure: the web
server reads the store and the alerts, and this adds them up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from gpufleet.collector.model.classify import free_reading
from gpufleet.collector.model.records import AlertRecord, GpuSeries
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.rules.catalog import RULES

#: the series the chart draws, stacked in this order (each GPU in one at each point)
STATES = ("busy", "wasted", "idle", "lost")
#: the rules whose alerts make a GPU wasted (the catalog's ``waste``)
WASTE_RULES = frozenset(r.name for r in RULES if r.waste)


Spans = dict[tuple[str, str], list[tuple[float, float]]]


def waste_spans(alerts: Iterable[AlertRecord], now: float) -> Spans:
    """(host, GPU index) -> the times a waste rule was firing on it (firing .. resolved, or now)."""
    out: Spans = {}
    for a in alerts:
        host, gpu = a.labels.get("host"), a.labels.get("gpu")
        if a.rule not in WASTE_RULES or host is None or gpu is None or a.fired_at is None:
            continue
        end = a.resolved_at if a.state == "resolved" and a.resolved_at is not None else now
        out.setdefault((host, gpu), []).append((a.fired_at, end))
    return out


def fleet_states(series: Sequence[GpuSeries], alerts: Iterable[AlertRecord], *, since: float, until: float,
                 points: int, thresholds: Thresholds) -> dict[str, Any]:
    """``{"since", "until", "step", "ts": [...], "busy": [...], "wasted": [...], ...}``: the GPUs in each
    state at each of about ``points`` times (the series' own step where it is coarser)."""
    step = max((s.step or 0.0) for s in series) if series else 0.0
    step = max(step, (until - since) / max(points, 1), 1.0)
    n = max(1, math.ceil((until - since) / step))
    counts = {state: [0] * n for state in STATES}
    spans = waste_spans(alerts, until)
    for s in series:
        states: list[str | None] = [None] * n
        for p in s.points:
            k = int((p.ts - since) // step)
            if not 0 <= k < n:
                continue
            util = p.util_max if p.util_max is not None else p.util_mean
            mem = p.mem_used_max if p.mem_used_max is not None else p.mem_used_mean
            if util is None and mem is None:
                state = "lost"
            else:
                state = "idle" if free_reading(util, mem, thresholds) else "busy"
            if states[k] in (None, "idle") or state == "busy":  # a point busy at any moment is busy
                states[k] = state
        for start, end in spans.get((s.host, str(s.index)), ()):
            first, last = max(0, int((start - since) // step)), min(n - 1, int((end - since) // step))
            for k in range(first, last + 1):
                if states[k] is not None and states[k] != "lost":
                    states[k] = "wasted"
        for k, counted in enumerate(states):
            if counted is not None:
                counts[counted][k] += 1
    return {"since": since, "until": until, "step": step, "ts": [since + k * step for k in range(n)],
            **counts}
