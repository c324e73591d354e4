"""Builders for hand-made wire snapshots, and a helper that runs one rule over a sequence of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.registry import RULE_TYPES
from gpufleet.collector.settings import DEFAULT_RULES, RuleConfig, Selector

from tests import builders

GIB = builders.GIB
proc, gpu, snap = builders.proc, builders.gpu, builders.snap


def make_rule(name: str, select: Selector | None = None, **params: Any) -> Rule:
    cfg = RuleConfig(name=name, params={**DEFAULT_RULES[name], **params}, select=select or Selector())
    return RULE_TYPES[name](cfg)


class Runner:
    """Feeds snapshots to one rule for one host like the engine does and returns its conditions."""

    def __init__(self, rule: Rule, host: str = "n3") -> None:
        self.rule = rule
        self.ctx = HostContext(name=host)

    def feed(self, snapshot: sample.Snapshot, now: float) -> list[Condition] | None:
        self.ctx.snapshot = snapshot
        self.ctx.snapshot_received = now
        self.rule.observe_snapshot(self.ctx, snapshot, now)
        return self.rule.conditions(self.ctx, now)

    def event(self, event: wire.Event, now: float) -> list[Condition] | None:
        self.rule.observe_event(self.ctx, event, now)
        return self.rule.conditions(self.ctx, now)


@pytest.fixture
def runner() -> Callable[..., Runner]:
    def make(name: str, select: Selector | None = None, host: str = "n3", **params: Any) -> Runner:
        return Runner(make_rule(name, select, **params), host)

    return make


class Builders:
    GIB = GIB
    proc = staticmethod(proc)
    gpu = staticmethod(gpu)
    snap = staticmethod(snap)


@pytest.fixture
def w() -> type[Builders]:
    """Snapshot builders: w.gpu(...), w.proc(...), w.snap(...)."""
    return Builders
