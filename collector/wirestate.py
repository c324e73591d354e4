"""What the collector's edge noticed about a host's frames, kept beside the rest of its live state.

:class:`EdgeLiveView` (the daemon's live view) makes a :class:`WireHostState` for every host, so the query
API, the rules and /metrics read these facts from the one state object the live view owns; the agent stream
(collector/transport/stream.py) writes them. A plain :class:`LiveView` (tests of the transport alone) makes
plain states, and the stream then keeps its bounds without recording these facts. Frames that were accepted
but changed on the way in are counted here, never silently: readings outside their plausible range
(nulled at decode), and (see the stream) frame types and fields of a newer minor version, ignored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.live import HostState, LiveView


@dataclass(slots=True)
class WireHostState(HostState):
    nulled_values: int = 0  # readings outside their plausible range, nulled at decode (wire.DecodeNotes)
    last_nulled: str | None = None  # the last one, e.g. "snapshot.gpus[0]: ecc_uncorrected=-1 outside 0..N"
    ignored_frames: int = 0  # frame types of this major version the collector does not know (newer agent)
    ignored_fields: int = 0  # fields it does not know, in frames it does
    last_ignored: str | None = None  # the last of either: "frame type 'future_thing'", "snapshot.gpus[0].x"
    dropped_frames: int = 0  # lines over the host's bytes budget, dropped unparsed
    dropped_bytes: int = 0
    dropped_events: int = 0  # events over the host's events budget
    over_budget: bool = False  # something was dropped in the last summary_interval (transport/budget.py)
    #: GPU UUIDs this host reported since ``uuids_since`` (wall time), across connections: bounded by the
    #: budget's max_gpus per UUID_WINDOW, so new UUIDs every frame cannot grow the GPU table without end
    uuids: set[str] = field(default_factory=set, repr=False, compare=False)
    uuids_since: float = 0.0
    #: seconds added to the agent's timestamps (its clock is this far behind the collector's; negative:
    #: ahead), while beyond the host's max_clock_skew; None while the clocks agree
    clock_skew: float | None = None

    def noted(self, notes: wire.DecodeNotes) -> None:
        """Count what decode changed in one frame."""
        if notes.out_of_range:
            self.nulled_values += notes.out_of_range
            self.last_nulled = notes.last
        if notes.unknown_fields:
            self.ignored_fields += notes.unknown_fields
            self.last_ignored = notes.last_unknown

    def ignored(self, frame: wire.IgnoredFrame) -> None:
        self.ignored_frames += 1
        self.last_ignored = f"frame type {frame.kind!r}"


class EdgeLiveView(LiveView):
    """The live view whose host states carry the edge's facts."""

    def add_host(self, name: str, tags: Iterable[str] = (), since: float | None = None) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = WireHostState(name=name, tags=list(tags),
                                             since=time.time() if since is None else since)
        return super().add_host(name, tags, since)


def edge_facts(state: HostState) -> dict[str, Any]:
    """The fields :class:`gpufleet.collector.query.HostInfo` shows (``gpufleet hosts``)."""
    if not isinstance(state, WireHostState):
        return {}
    return {"nulled_values": state.nulled_values, "last_nulled": state.last_nulled,
            "clock_skew": state.clock_skew, "ignored_frames": state.ignored_frames,
            "ignored_fields": state.ignored_fields, "last_ignored": state.last_ignored,
            "over_budget": state.over_budget, "dropped_frames": state.dropped_frames,
            "dropped_events": state.dropped_events}


def budget_counts(state: HostState) -> dict[str, int]:
    """Frames and events dropped over the host's budget (zero for a plain :class:`HostState`)."""
    if isinstance(state, WireHostState):
        return {"frames": state.dropped_frames, "events": state.dropped_events, "bytes": state.dropped_bytes}
    return {"frames": 0, "events": 0, "bytes": 0}


def wire_counts(state: HostState) -> dict[str, int]:
    """The edge's counters of any host state (all zero for a plain :class:`HostState`)."""
    if isinstance(state, WireHostState):
        return {"frame": state.ignored_frames, "field": state.ignored_fields, "value": state.nulled_values}
    return {"frame": 0, "field": 0, "value": 0}
