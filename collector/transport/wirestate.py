"""Readers of what the collector's edge noticed about a host's frames (the fields live on
:class:`~gpufleet.collector.fleet.live.HostState`, which the live view owns; the agent stream writes them):
the query API, the rules and /metrics read them through these. Frames accepted but changed on the way in are
counted, never silent: readings outside their plausible range (nulled at decode), and frame types and
fields of a newer minor version, ignored."""

from __future__ import annotations

from typing import Any

from gpufleet.collector.fleet.live import HostState


def edge_facts(state: HostState) -> dict[str, Any]:
    """The fields :class:`gpufleet.collector.fleet.query.HostInfo` shows (``gpufleet hosts``)."""
    return {"nulled_values": state.nulled_values, "last_nulled": state.last_nulled,
            "clock_skew": state.clock_skew, "ignored_frames": state.ignored_frames,
            "ignored_fields": state.ignored_fields, "last_ignored": state.last_ignored,
            "over_budget": state.over_budget, "dropped_frames": state.dropped_frames,
            "dropped_events": state.dropped_events}


def budget_counts(state: HostState) -> dict[str, int]:
    """Frames and events dropped over the host's budget."""
    return {"frames": state.dropped_frames, "events": state.dropped_events, "bytes": state.dropped_bytes}


def wire_counts(state: HostState) -> dict[str, int]:
    """The edge's counters of a host."""
    return {"frame": state.ignored_frames, "field": state.ignored_fields, "value": state.nulled_values}
