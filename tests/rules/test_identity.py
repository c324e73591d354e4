"""duplicate_gpu: one alert per UUID reported by two hosts at once; a GPU moved between hosts is not one."""

from __future__ import annotations

from typing import Any

from gpufleet.collector.rules.base import HostContext


class _Host:
    """One host's view of a shared rule, fed the way the engine feeds it."""

    def __init__(self, rule: Any, host: str) -> None:
        self.rule, self.ctx = rule, HostContext(name=host)

    def feed(self, snapshot: Any, now: float) -> Any:
        self.ctx.snapshot = snapshot
        self.rule.observe_snapshot(self.ctx, snapshot, now)
        return self.rule.conditions(self.ctx, now)


def _pair(runner: Any) -> tuple[_Host, _Host]:
    rule = runner("duplicate_gpu", window=30.0).rule
    return _Host(rule, "gpu-a"), _Host(rule, "gpu-b")


def test_same_uuid_on_two_hosts_is_one_alert_naming_both(runner, w) -> None:
    a, b = _pair(runner)
    assert a.feed(w.snap(w.gpu(0), w.gpu(1)), 100.0) == []  # only one reporter so far
    conds = b.feed(w.snap(w.gpu(0), w.gpu(1)), 100.5)
    assert conds is not None and [c.labels["gpu"] for c in conds] == ["0", "1"]
    assert all(c.labels["host"] == "gpu-b" and "gpu-a and gpu-b" in c.summary for c in conds)
    assert a.rule.conditions(a.ctx, 101.0) == []  # the other host does not page again for the same GPU


def test_clears_when_one_host_stops_reporting(runner, w) -> None:
    a, b = _pair(runner)
    a.feed(w.snap(w.gpu(0)), 100.0)
    assert b.feed(w.snap(w.gpu(0)), 100.0)
    assert b.rule.conditions(b.ctx, 129.0)
    assert b.rule.conditions(b.ctx, 131.0) == []  # gpu-a silent past the window
    a.feed(w.snap(w.gpu(0)), 140.0)
    assert a.rule.conditions(a.ctx, 140.0) == []  # gpu-b's own report is stale now: not duplicated


def test_gpu_moved_to_another_host_is_not_a_duplicate(runner, w) -> None:
    a, b = _pair(runner)
    a.feed(w.snap(w.gpu(0), w.gpu(1)), 100.0)
    a.feed(w.snap(w.gpu(1)), 101.0)  # GPU 0 pulled from gpu-a ...
    assert b.feed(w.snap(w.gpu(0)), 102.0) == []  # ... and seated in gpu-b
    b.rule.forget_host("gpu-a")
    assert b.feed(w.snap(w.gpu(0), w.gpu(1)), 103.0) == []
