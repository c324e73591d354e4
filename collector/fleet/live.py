"""The in-memory live view of the fleet: the one owner of host state, and the hub frames pass through.

The transport owns connections and reports into the :class:`LiveView`; the live view records, then feeds
everything downstream (store writer, alert engine) through the :class:`FleetSink` interface; the query API
and metrics read it. Calls are synchronous and must not block: a sink that needs to do I/O queues the work
(bounded) and returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.views import HostRecord, HostStatus, MaintenanceRecord

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HostState:
    """What the collector knows about one host right now. ``name`` is the configured (dialled) name."""

    name: str
    status: HostStatus = "connecting"
    reason: str | None = None  # why down (or why the last connection ended)
    since: float = field(default_factory=time.time)  # when status last changed
    last_seen: float | None = None  # wall time of the last frame received
    tags: list[str] = field(default_factory=list)
    agent_version: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_version: int | None = None
    reported_hostname: str | None = None  # what hello claimed; informational only
    backend: str | None = None
    connects: int = 0  # successful connections so far
    reconnects: int = 0  # connection attempts after the first
    frames: int = 0
    bad_frames: int = 0
    lag: float | None = None  # received wall time minus the frame's ts, last frame
    hello: wire.Hello | None = None
    snapshot: sample.Snapshot | None = None  # the latest snapshot
    last_xid: dict[int, int] = field(default_factory=dict)  # GPU index -> the last Xid it reported
    # What the collector's edge (collector/transport/stream.py, budget.py) noticed about the host's frames:
    # accepted frames changed on the way in are counted, never silent.
    nulled_values: int = 0  # readings outside their plausible range, nulled at decode (wire.DecodeNotes)
    last_nulled: str | None = None  # the last one, e.g. "snapshot.gpus[0]: ecc_uncorrected=-1 outside 0..N"
    ignored_frames: int = 0  # frame types of this major version the collector does not know (newer agent)
    ignored_fields: int = 0  # fields it does not know, in frames it does
    last_ignored: str | None = None  # the last of either: "frame type 'future_thing'", "snapshot.gpus[0].x"
    dropped_frames: int = 0  # lines over the host's bytes budget, dropped unparsed
    dropped_bytes: int = 0
    dropped_events: int = 0  # events over the host's events budget
    delta_mismatches: int = 0  # 1.3 deltas that did not apply to the connection's base: dropped, resynced
    over_budget: bool = False  # something was dropped in the last summary_interval (transport/budget.py)
    #: GPU UUIDs this host reported since ``uuids_since`` (wall time), across connections: bounded by the
    #: budget's max_gpus per UUID_WINDOW, so new UUIDs every frame cannot grow the GPU table without end
    uuids: set[str] = field(default_factory=set, repr=False, compare=False)
    uuids_since: float = 0.0
    #: seconds added to the agent's timestamps (its clock is this far behind the collector's; negative:
    #: ahead), while beyond the host's max_clock_skew; None while the clocks agree
    clock_skew: float | None = None
    #: the maintenance window in force (who, why, until when), set through LiveView.set_maintenance
    maintenance: MaintenanceRecord | None = None

    def record(self) -> HostRecord:
        """Its identity and connection facts now: a copy the store's writer thread may keep."""
        return HostRecord(self.name, self.status, self.reason, self.last_seen, self.agent_version,
                          self.driver_version, list(self.tags), self.since, self.nvml_version,
                          self.cuda_version, self.reported_hostname, self.backend)

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

    def observe(self, frame: sample.Frame, received: float) -> None:
        """Record a valid frame: liveness, the latest snapshot, and the versions a hello announces."""
        self.last_seen = received
        if isinstance(frame, sample.Snapshot):
            self.snapshot = frame
        elif isinstance(frame, wire.Event):
            if frame.kind == "xid" and frame.xid is not None and frame.gpu_index is not None:
                self.last_xid[frame.gpu_index] = frame.xid
        elif isinstance(frame, wire.Hello):
            self.hello = frame
            self.agent_version = frame.agent_version
            self.driver_version = frame.driver_version
            self.nvml_version = frame.nvml_version
            self.cuda_version = frame.cuda_version
            self.reported_hostname = frame.hostname
            self.backend = frame.backend


class FleetSink(Protocol):
    """Receives everything the live view records. Must return quickly and never raise."""

    def host_state(self, state: HostState) -> None:
        """Called on every status change (connecting / up / down) of a host."""

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        """Called for every valid frame from ``host`` (the dialled name)."""


class LiveView:
    """The only owner of host state: the latest of every host, for queries, rules and metrics.

    The transport reports into it (it is the transport's :class:`FleetSink`) on the :class:`HostState`
    objects :meth:`add_host` made; it records each frame once (liveness, lag, latest snapshot, versions) and
    then hands it to its ``listeners`` (the store's writer queue, the alert engine) in order, a failing
    listener never stopping the others. Nothing else creates or writes host state.
    """

    def __init__(self, listeners: Iterable[FleetSink] = ()) -> None:
        self.hosts: dict[str, HostState] = {}
        self.listeners: list[FleetSink] = list(listeners)

    def add_host(self, name: str, tags: Iterable[str] = (), since: float | None = None) -> HostState:
        """The host's state, created on first use (a configured host, or one a frame names)."""
        state = self.hosts.get(name)
        if state is None:
            state = self.hosts[name] = HostState(name=name, tags=list(tags),
                                                 since=time.time() if since is None else since)
        elif tags:
            state.tags = list(tags)
        return state

    def remove_host(self, name: str) -> None:
        self.hosts.pop(name, None)

    def set_maintenance(self, name: str, window: MaintenanceRecord | None) -> None:
        """The maintenance window now in force for ``name`` (None: none), which every view shows with the
        host's status; the status itself is the transport's to set (it holds the host's session)."""
        state = self.hosts.get(name)
        if state is not None:
            state.maintenance = window

    def carry_over(self, rows: Iterable[HostRecord], latest: Mapping[str, sample.Snapshot]) -> int:
        """Seed the configured hosts from the store after a restart: last seen, versions, the last GPUs.

        The status stays ``connecting`` until a fresh attempt succeeds or fails, but a host that stays down
        does not read as "never seen, 0 GPUs" while the store saw it a minute ago. Returns how many hosts
        were seeded. Never sent to the listeners: it is what they stored, not a new observation.
        """
        seeded = 0
        for row in rows:
            state = self.hosts.get(row.name)
            if state is None or state.frames or row.last_seen is None:
                continue  # not configured now, already live, or never seen
            state.last_seen = row.last_seen
            state.agent_version = state.agent_version or row.agent_version
            state.driver_version = state.driver_version or row.driver_version
            stored = latest.get(row.name)
            if stored is not None and state.snapshot is None:  # the store keeps no snapshot without GPUs
                state.snapshot = stored
            seeded += 1
        return seeded

    # -- what the transport reports
    def host_state(self, state: HostState) -> None:
        """A status change, made on the state :meth:`add_host` returned: passed on to the listeners."""
        if self.hosts.get(state.name) is not state:
            raise ValueError(f"host state of {state.name!r} was not made by this live view")
        for sink in self.listeners:
            try:
                sink.host_state(state)
            except Exception:  # noqa: BLE001 - a broken consumer must not break ingest
                log.exception("%r failed on the host state of %s", sink, state.name)

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        """A valid frame: recorded here, once, then passed on to the listeners."""
        state = self.add_host(host)
        state.frames += 1
        state.lag = received - frame.ts
        state.observe(frame, received)
        for sink in self.listeners:
            try:
                sink.frame(host, frame, received)
            except Exception:  # noqa: BLE001
                log.exception("%r failed on a %s frame from %s", sink, frame.type, host)
