"""The snapshot facts (collector/model/facts.py) are classify's and jobkey's answers, worked out once per
snapshot for every rule and the job tracker; and the bucketed window mean the underused rule keeps."""

from __future__ import annotations

import random
import statistics

import pytest
from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.fleet.jobs import JobTracker
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.model import classify, facts, sample, thresholds
from gpufleet.collector.model.jobkey import group_key, job_key
from gpufleet.collector.rules.series import WindowMean
from gpufleet.collector.settings import Config, HostConfig, default_rules

from tests.builders import gpu, proc, scenario_frames, snap

STRICT = thresholds.Thresholds(stuck_power_ratio=0.2, min_memory_bytes=1 << 30)


@pytest.mark.parametrize("t", [thresholds.DEFAULT_THRESHOLDS, STRICT], ids=["defaults", "strict"])
def test_facts_are_classify_and_jobkey_on_every_scenario(t):
    """Over every bundled scenario's samples the facts equal the one classification, GPU by GPU."""
    checked = 0
    for wire_frame in scenario_frames(samples=6):
        frame = sample.from_wire(wire_frame)
        if not isinstance(frame, sample.Snapshot):
            continue
        got = facts.SnapshotFacts.build("n3", frame, t)
        assert [gf.gpu for gf in got.gpus] == list(frame.gpus)
        for gf in got.gpus:
            g = gf.gpu
            assert gf.activity == classify.activity(g, t)
            assert gf.holders == classify.holders(g, t)
            assert gf.waste == classify.waste_users(g, t)
            assert gf.jobs == {p.pid: job_key("n3", p) for p in g.processes}
            assert gf.groups == {p.pid: group_key("n3", p) for p in g.processes}
            checked += len(g.processes)
    assert checked > 50, "the corpus must carry processes"


def test_one_build_per_snapshot_for_the_rules_and_the_job_tracker(monkeypatch):
    """The daemon's wiring: the engine's rules and the tracker share one FleetFacts, so a snapshot is
    classified once, and the next snapshot afresh."""
    builds: list[sample.Snapshot] = []
    real = facts.SnapshotFacts.build.__func__  # type: ignore[attr-defined]

    def counting(cls, host, snapshot, thresholds, previous=None):
        builds.append(snapshot)
        return real(cls, host, snapshot, thresholds, previous)

    monkeypatch.setattr(facts.SnapshotFacts, "build", classmethod(counting))
    config = Config(hosts=[HostConfig(name="n3", address="127.0.0.1")], rules=default_rules())
    shared = facts.FleetFacts(thresholds.thresholds_of(config.rules))
    tracker = JobTracker(None, facts=shared)
    live = LiveView([AlertEngine(config, None, facts=shared), tracker])
    live.add_host("n3", since=0.0)
    first = snap(gpu(0, util=0, procs=[proc(7, mem_gib=10)]), ts=1.0)
    second = snap(gpu(0, util=0, procs=[proc(7, mem_gib=10)]), ts=2.0)
    live.frame("n3", first, 1.0)
    live.frame("n3", second, 2.0)
    assert builds == [first, second]
    assert tracker.jobs and all(job.wasted > 0 for job in tracker.jobs.values()), "the tracker read them"


def test_keys_carried_over_are_the_keys_worked_out_afresh():
    """FleetFacts reuses a process's keys from the host's previous snapshot only while everything they
    depend on is unchanged: over the scenarios' samples and through changes of job, start and parent."""
    fleet = facts.FleetFacts(thresholds.DEFAULT_THRESHOLDS)
    frames = [f for f in map(sample.from_wire, scenario_frames(samples=6))
              if isinstance(f, sample.Snapshot)]
    changed = [
        snap(gpu(0, procs=[proc(7, start=100.0, ppid=50, command="python train.py --rank 0")])),
        snap(gpu(0, procs=[proc(7, start=100.0, ppid=50, command="python train.py --rank 0", job="90210")])),
        snap(gpu(0, procs=[proc(7, start=200.0, ppid=50, command="python train.py --rank 0")])),  # pid reused
        snap(gpu(0, procs=[proc(7, start=200.0, ppid=1, command="python train.py --rank 0")])),  # orphaned
        snap(gpu(0, procs=[proc(7, start=200.0, ppid=1, command="python train.py --rank 0",
                                container="4f1e2d3c4b5a69788796a5b4")])),
    ]
    seen = set()
    for frame in [*frames, *changed, *frames]:
        got = fleet.of("n3", frame)
        for gf in got.gpus:
            assert gf.jobs == {p.pid: job_key("n3", p) for p in gf.gpu.processes}
            assert gf.groups == {p.pid: group_key("n3", p) for p in gf.gpu.processes}
            seen.update(gf.jobs.values())
    assert {"slurm:90210", "pid:7.100@n3", "pid:7.200@n3", "container:4f1e2d3c4b5a@n3"} <= seen


def test_a_rule_with_its_own_thresholds_does_not_read_the_shared_facts():
    from gpufleet.collector.rules.base import HostContext
    from gpufleet.collector.rules.registry import build_rules

    rule = build_rules(default_rules(), STRICT)["wasted"]
    s = snap(gpu(0, util=0, procs=[proc(7, mem_gib=0.5)]))
    shared = facts.SnapshotFacts.build("n3", s, thresholds.DEFAULT_THRESHOLDS)
    ctx = HostContext(name="n3", snapshot=s, facts=shared)
    got = rule.facts(ctx, s)
    assert got.thresholds == STRICT and got.gpus[0].holders == {}, "0.5 GiB is under STRICT's 1 GiB"


def test_window_mean_counts_every_value_of_the_window():
    rng = random.Random(5)
    span, mean = 100.0, WindowMean(100.0, buckets=20)
    values: list[tuple[float, float]] = []
    for i in range(400):
        ts, v = float(i), float(rng.randint(0, 100))
        mean.add(ts, v)
        values.append((ts, v))
        oldest = mean.window.oldest()
        kept = [v for t, v in values if oldest is None or t >= oldest]
        assert mean.mean() == pytest.approx(statistics.mean(kept)), "every value since the oldest bucket"
        assert oldest is None or ts - span - 10.0 <= oldest, "and none older than the span and two buckets"
    assert mean.full()


def test_window_mean_does_not_alias_a_sawtooth_of_the_bucket_period():
    """Skipping samples (one kept per bucket) would read a 5 s sawtooth as all-high; buckets sum every one."""
    mean = WindowMean(100.0, buckets=20)  # 5 s buckets
    for i in range(300):
        mean.add(float(i), 90.0 if i % 5 == 0 else 10.0)
    assert mean.mean() == pytest.approx(26.0, abs=1.0)


def test_window_mean_is_not_full_before_its_span():
    mean = WindowMean(100.0, buckets=20)
    for i in range(80):
        mean.add(float(i), 1.0)
    assert not mean.full()


def test_window_mean_stays_full_when_its_span_is_few_samples_long():
    """13 s samples in a 60 s window: 52 s from oldest to newest, under 90 % of it, so underused never saw
    a full window (series.observed counts each sample as its interval)."""
    mean = WindowMean(60.0)
    fulls = []
    for i in range(20):
        mean.add(13.0 * i, 1.0)
        fulls.append(mean.full())
    assert fulls == [False] * 4 + [True] * 16
