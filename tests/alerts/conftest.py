"""Fixtures for the alert engine: a fake clock, an in-memory store (only the methods the engine uses),
a recording notifier behind a real dispatcher, and snapshot builders."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from gpufleet.agent import wire
from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.errors import StorageError
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import (
    AlertingConfig,
    Config,
    HostConfig,
    NotifierConfig,
    RuleConfig,
    default_rules,
)

from tests import builders
from tests.builders import FakeClock

GIB = builders.GIB
proc, gpu, snap = builders.proc, builders.gpu, builders.snap


class FakeStore:
    """The Store's alert/silence methods, in memory (copies in and out, like a database)."""

    def __init__(self) -> None:
        self.alerts: dict[str, AlertRecord] = {}
        self.silences: dict[int, SilenceRecord] = {}
        self.fail = False
        self.saves = 0

    async def save_alerts(self, alerts: list[AlertRecord]) -> None:
        if self.fail:
            raise StorageError("disk full")
        self.saves += 1
        for a in alerts:
            self.alerts[a.fingerprint] = copy.deepcopy(a)

    async def load_alerts(self, *, active_only: bool = True, since: float | None = None) -> list[AlertRecord]:
        return [copy.deepcopy(a) for a in self.alerts.values()
                if (not active_only or a.state != "resolved") and (since is None or a.updated_at >= since)]

    async def add_silence(self, silence: SilenceRecord) -> int:
        sid = len(self.silences) + 1
        self.silences[sid] = dataclasses.replace(silence, id=sid, matchers=dict(silence.matchers))
        return sid

    async def list_silences(self, *, include_expired: bool = False,
                            now: float | None = None) -> list[SilenceRecord]:
        assert now is not None
        return [dataclasses.replace(s, matchers=dict(s.matchers)) for s in self.silences.values()
                if include_expired or s.ends_at > now]

    async def expire_silence(self, silence_id: int, now: float) -> bool:
        s = self.silences.get(silence_id)
        if s is None or s.ends_at <= now:
            return False
        s.ends_at = now
        return True


class Recorder(Notifier):
    """A real notifier that keeps what it was sent (and can be told to fail)."""

    kinds = frozenset({"alert", "refresh", "user", "report"})

    def __init__(self, name: str = "rec", *, targeted: bool = False, **cfg: Any) -> None:
        super().__init__(NotifierConfig(name=name, kind="webhook", urls=["http://127.0.0.1:1/"], **cfg))
        self.got: list[Notification] = []
        self.targeted_only = targeted
        self.fail_with: DeliveryError | None = None

    async def send(self, notification: Notification) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.got.append(notification)

    def alerts(self, kind: str = "alert") -> list[list[tuple[str, str]]]:
        """Per notification: (rule/labels summary, state) pairs; compact for asserts."""
        return [[(a.labels.get("host", "") + "/" + a.rule, a.state) for a in n.alerts]
                for n in self.got if n.kind == kind]


def make_config(*, group_wait: float = 30.0, group_interval: float = 300.0, repeat_interval: float = 3600.0,
                rules: dict[str, dict[str, Any]] | None = None, hosts: list[HostConfig] | None = None,
                **alerting: Any) -> Config:
    rcs = default_rules()
    for name, params in (rules or {}).items():
        select = params.pop("select", None)
        enabled = params.pop("enabled", True)
        rc = rcs[name]
        rcs[name] = RuleConfig(name=name, enabled=enabled, params={**rc.params, **params},
                               select=select or rc.select)
    return Config(hosts=hosts or [HostConfig(name="n3", tags=["prod"]), HostConfig(name="n4")], rules=rcs,
                  alerting=AlertingConfig(group_wait=group_wait, group_interval=group_interval,
                                          repeat_interval=repeat_interval, **alerting))


class Harness:
    """An engine with a fake clock, a fake store and a recording notifier; ``tick`` advances and settles."""

    def __init__(self, config: Config, store: FakeStore | None, clock: FakeClock,
                 notifiers: list[Notifier]) -> None:
        self.config, self.store, self.clock = config, store, clock
        self.notifiers = notifiers
        self.dispatcher = NotificationDispatcher(notifiers, queue_size=100, clock=clock, backoff=0.01)
        self.engine = AlertEngine(config, store, clock=clock, dispatcher=self.dispatcher)
        self.live: set[str] = set()

    async def tick(self, t: float | None = None) -> None:
        """Advance the clock, let live hosts send a heartbeat (as a real agent does), evaluate, settle."""
        if t is not None:
            self.clock.t = t
        for host in self.live:
            self.engine.frame(host, sample.Heartbeat(proto=wire.PROTO_VERSION, ts=self.clock.t), self.clock.t)
        await self.engine.evaluate()
        assert await self.dispatcher.join(5.0)

    def up(self, host: str = "n3") -> None:
        self.live.add(host)
        self.engine.host_state(HostState(name=host, status="up", since=self.clock.t))

    def down(self, host: str = "n3", reason: str = "connection lost") -> None:
        self.live.discard(host)
        self.engine.host_state(HostState(name=host, status="down", reason=reason, since=self.clock.t))

    def mute_agent(self, host: str = "n3") -> None:
        """The host stays "up" but its agent stops sending frames."""
        self.live.discard(host)

    def send(self, snapshot: sample.Snapshot, host: str = "n3") -> None:
        self.engine.frame(host, snapshot, self.clock.t)

    def event(self, event: wire.Event, host: str = "n3") -> None:
        self.engine.frame(host, event, self.clock.t)


class Builders:
    gpu = staticmethod(gpu)
    proc = staticmethod(proc)
    snap = staticmethod(snap)
    config = staticmethod(make_config)
    recorder = Recorder


@pytest.fixture
def w() -> type[Builders]:
    return Builders


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
async def harness(clock: FakeClock, store: FakeStore) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(config: Config | None = None, *, notifiers: list[Notifier] | None = None,
             use_store: bool = True) -> Harness:
        h = Harness(config or make_config(), store if use_store else None, clock,
                    notifiers if notifiers is not None else [Recorder()])
        made.append(h)
        return h

    yield make
    for h in made:
        await h.engine.stop(1.0)
