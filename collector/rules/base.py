"""What every rule shares: the Condition a rule reports, the host context it reads, selector matching.

A rule turns observations (snapshots, events, host states) into *conditions*: "this is true right now".
It knows nothing about pending/firing, notifications or silences; the alert engine does that. Keeping the
two apart lets each rule be tested from hand-built snapshots, and the lifecycle from hand-built conditions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpufleet.agent import wire
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import SnapshotFacts
from gpufleet.collector.model.names import matches, matches_any
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.rules import catalog
from gpufleet.collector.settings import RuleConfig, Selector
from gpufleet.collector.units import fmt_duration


@dataclass(slots=True)
class Condition:
    """One thing a rule finds true now. ``labels`` identify it (the engine adds ``rule``)."""

    rule: str
    labels: dict[str, str]
    summary: str
    description: str = ""
    value: float | None = None
    severity: str | None = None  # None: the rule's configured severity
    annotations: dict[str, str] = field(default_factory=dict)  # extra facts (pid, command, memory ...)


@dataclass(slots=True)
class HostContext:
    """What the alert engine has been told about one host, in the order it was told, handed to rules.

    Not a second owner of host state (LiveView's HostState is the one): it is the engine's input, written
    only by the engine's sink calls. ``state`` is a copy taken when the transport reported a change,
    because the live object also changes without a report (the collector's own hang-up at shutdown is not
    an observation of the host, and must not raise host_down); ``snapshot`` is the one the rules observed
    (LiveView's may be the store's carried-over snapshot, which rules must not judge after a restart).
    """

    name: str
    tags: list[str] = field(default_factory=list)
    interval: float = 1.0  # the agent's sampling interval (from the host's config)
    state: HostState | None = None
    hello: wire.Hello | None = None  # the agent's last hello
    snapshot: sample.Snapshot | None = None  # latest
    snapshot_received: float | None = None
    last_frame: float | None = None  # when any frame last arrived
    uuids: dict[int, str] = field(default_factory=dict)  # index -> uuid, from hello and snapshots
    facts: SnapshotFacts | None = None  # the latest snapshot classified (the engine's FleetFacts)


class Rule:
    """Base of every rule. Subclasses override the observe hooks they need and :meth:`conditions`.

    ``conditions`` returns the complete set of conditions of this rule for the host, or None when the rule
    has no information about the host yet (so the engine keeps, rather than resolves, what it knew, e.g.
    right after a restart before the first snapshot arrives).
    """

    name: ClassVar[str] = ""
    #: its conditions come from a GPU's process list: on a GPU whose list the agent could not read, its
    #: alerts are kept as they are, neither resolved nor started (alerts/lifecycle.py)
    reads_processes: ClassVar[bool] = False
    #: evaluated on every engine tick, not only when a frame arrives (timeouts, hold times)
    time_based: ClassVar[bool] = False
    #: evaluated when a snapshot arrives
    on_snapshot: ClassVar[bool] = True

    #: the rule's own parameters, typed (collector/rules/catalog.py); a subclass names its own class
    p: catalog.Params

    def __init__(self, config: RuleConfig) -> None:
        self.spec = catalog.spec(self.name)
        self.config = config  # its params: the catalog's defaults under what was configured (RuleConfig)
        params = config.params
        self.params: dict[str, Any] = params
        self.p = self.spec.params.of(params)
        #: the shared classification's thresholds as this rule's params set them (model/classify.py);
        #: build_rules replaces them with the whole config's, so every rule classifies alike
        self.thresholds = Thresholds.from_rules({config.name: params})

    @property
    def for_seconds(self) -> float:
        return self.config.for_seconds

    @property
    def severity(self) -> str:
        return self.config.severity

    def note_once_per(self) -> float | None:
        """Seconds between notes about one process (alerts/notes.py); None: a user is noted once per
        ``repeat_interval`` per rule."""
        return None

    def facts(self, ctx: HostContext, snapshot: sample.Snapshot) -> SnapshotFacts:
        """The snapshot classified under this rule's thresholds: the engine's shared answer (``ctx.facts``)
        where it is this snapshot's under the same thresholds (always, for a config-built engine), else
        worked out here (a rule built by hand with its own params)."""
        facts = ctx.facts
        if facts is None or not facts.agrees(snapshot, self.thresholds):
            facts = ctx.facts = SnapshotFacts.build(ctx.name, snapshot, self.thresholds)
        return facts

    def each_gpu(self, ctx: HostContext,
                 judge: Callable[[sample.GpuSample], Condition | None]) -> list[Condition] | None:
        """The conditions of a rule that judges each GPU of the latest snapshot on its own (None before the
        first snapshot: the engine keeps what it knew)."""
        if ctx.snapshot is None:
            return None
        return [c for g in ctx.snapshot.gpus if (c := judge(g)) is not None]

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        """Update internal state from a new snapshot (``ctx.snapshot`` is already this one)."""

    def observe_event(self, ctx: HostContext, event: wire.Event, now: float) -> bool:
        """Update state from an event; True when the event concerns this rule (re-evaluate it)."""
        return False

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        raise NotImplementedError

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        """One line saying why the alert cleared, read from the current state."""
        host = alert.labels.get("host", "")
        return f"{alert.rule} on {host} resolved after {fmt_duration(now - alert.started_at)}"

    def keeps_firing(self, alert: AlertRecord, ctx: HostContext) -> bool:
        """May ``keep_firing_for`` hold this alert whose condition cleared? False where another alert of
        the rule took its place (the flap it damps is not happening)."""
        return True

    def restore(self, alert: AlertRecord) -> None:
        """Seed internal state from an alert loaded at startup (so a restart does not forget)."""

    def forget_host(self, host: str) -> None:
        """Drop per-host state (host removed)."""



class TickRule(Rule):
    """A rule judged on the engine's tick (timeouts, hold times, the host's state), not per snapshot."""

    time_based = True
    on_snapshot = False

# ------------------------------------------------------------------------------------------ selectors


def selector_matches(select: Selector, labels: dict[str, str], tags: list[str]) -> bool:
    """Does a condition with these labels, on a host with these tags, count for the rule?

    Every non-empty list of the selector must match (AND across fields, OR within one). A field restricts
    only conditions that carry the label: a host-level condition (no ``gpu``) is not excluded by ``gpus``.
    """
    host = labels.get("host")
    if select.hosts and host is not None and not matches_any(host, select.hosts):
        return False
    if select.tags and not any(matches_any(t, select.tags) for t in tags):
        return False
    gpu = labels.get("gpu")
    if select.gpus and gpu is not None and gpu.isdigit() and int(gpu) not in select.gpus:
        return False
    user = labels.get("user")
    if user is not None:
        if select.users and not matches_any(user, select.users):
            return False
        if select.exclude_users and matches_any(user, select.exclude_users):
            return False
    return True


def matchers_match(matchers: dict[str, str], labels: dict[str, str]) -> bool:
    """Silence matching: every matcher must match its label, exactly or as a shell glob.

    A missing label reads as "" so ``user=*`` also matches alerts without a user; ``user=alice`` does not.
    """
    return all(matches(labels.get(k, ""), v) for k, v in matchers.items())


def find_gpu(ctx: HostContext | None, labels: dict[str, str]) -> sample.GpuSample | None:
    """The GPU an alert's labels name in the host's latest snapshot (by uuid, else by index)."""
    if ctx is None or ctx.snapshot is None:
        return None
    uuid, index = labels.get("uuid"), labels.get("gpu")
    for g in ctx.snapshot.gpus:
        if (uuid and g.uuid == uuid) or (not uuid and str(g.index) == index):
            return g
    return None
