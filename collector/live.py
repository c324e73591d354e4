"""The in-memory live view of the fleet, and the sink interface the transport feeds.

The transport owns connections; everything downstream (store writer, rule engine, query API, metrics)
receives frames through a :class:`FleetSink`. Calls are synchronous and must not block: a sink that needs
to do I/O queues the work (bounded) and returns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gpufleet.agent import wire

log = logging.getLogger(__name__)

HostStatus = Literal["connecting", "up", "down"]


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
    snapshot: wire.Snapshot | None = None  # the latest snapshot

    def observe(self, frame: wire.Frame, received: float) -> None:
        """Record a valid frame: liveness, the latest snapshot, and the versions a hello announces."""
        self.last_seen = received
        if isinstance(frame, wire.Snapshot):
            self.snapshot = frame
        elif isinstance(frame, wire.Hello):
            self.hello = frame
            self.agent_version = frame.agent_version
            self.driver_version = frame.driver_version
            self.nvml_version = frame.nvml_version
            self.cuda_version = frame.cuda_version
            self.reported_hostname = frame.hostname
            self.backend = frame.backend


class FleetSink(Protocol):
    """Receives everything the transport learns. Must return quickly and never raise."""

    def host_state(self, state: HostState) -> None:
        """Called on every status change (connecting / up / down) of a host."""

    def frame(self, host: str, frame: wire.Frame, received: float) -> None:
        """Called for every valid frame from ``host`` (the dialled name)."""


class LiveView:
    """Latest state of every host, for queries, rules and metrics. Also a :class:`FleetSink`."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostState] = {}

    def host_state(self, state: HostState) -> None:
        self.hosts[state.name] = state

    def frame(self, host: str, frame: wire.Frame, received: float) -> None:
        state = self.hosts.get(host)
        if state is None:
            state = self.hosts[host] = HostState(name=host)
        state.observe(frame, received)  # idempotent: the transport may have recorded it on this object


class FanOut:
    """Feeds several sinks in order; one sink failing never stops the others."""

    def __init__(self, *sinks: FleetSink) -> None:
        self.sinks = list(sinks)

    def host_state(self, state: HostState) -> None:
        for sink in self.sinks:
            try:
                sink.host_state(state)
            except Exception:  # noqa: BLE001 - a broken consumer must not break ingest
                log.exception("sink %r failed on host_state", sink)

    def frame(self, host: str, frame: wire.Frame, received: float) -> None:
        for sink in self.sinks:
            try:
                sink.frame(host, frame, received)
            except Exception:  # noqa: BLE001
                log.exception("sink %r failed on frame from %s", sink, host)
