"""The collector's work per change gives what its work per sample gave (issue 33).

The rules, the facts and the job records keep what they derive from a GPU's processes while its process list
is the same object (the stream's edge, collector/transport/delta.py, keeps it so while the processes stay the
same but for their utilization). Fed each sample as a fresh object (full frames decoded anew: what every
rule saw before) and fed the same samples through the 1.3 wire (the agent's delta encoder, the collector's
decoder and edge), the alert engine holds the same alerts, field for field, at every tick, and the job tracker
writes the same records: over the rules corpus and over the simulator's cycle, whose processes come, go and
change their memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Iterator

import pytest
from gpufleet.agent import delta, wire
from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.fleet.accounting import GpuClock, charge
from gpufleet.collector.fleet.jobs import JobTracker
from gpufleet.collector.model import sample
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.records import JobRecord
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.settings import Config, HostConfig
from gpufleet.collector.transport import wirefast
from gpufleet.collector.transport.delta import DeltaBase

from tests import churn
from tests.rules import rules_corpus as corpus

Feed = churn.Feed


def _through_the_wire(snaps: Iterator[sample.Snapshot]) -> Iterator[sample.Snapshot]:
    """Each snapshot as a 1.3 agent sends it (a keyframe, then deltas), rebuilt by the collector's edge."""
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    base = DeltaBase()
    for s in snaps:
        line = encoder.encode(wire.decode(sample.encode(s)))  # type: ignore[arg-type]
        yield churn.edge(base, wirefast.decode(line))


async def _run(config: Config, feed: Feed, seconds: int) -> tuple[list[dict[str, object]], list[JobRecord]]:
    """Alerts at every tick (every 5 s), and the job records, of the engine and tracker fed ``feed``."""
    clock = [0.0]
    facts = FleetFacts(thresholds_of(config.rules))
    engine = AlertEngine(config, None, clock=lambda: clock[0], facts=facts)
    jobs = JobTracker(None, firing=engine.firing, facts=facts)
    await engine.start(run_tick=False)
    ticks: list[dict[str, object]] = []
    for t, (host, snap) in zip(range(seconds), feed, strict=False):
        clock[0] = snap.ts
        engine.frame(host, snap, snap.ts)
        jobs.frame(host, snap, snap.ts)
        if t % 5 == 0:
            await engine.evaluate(snap.ts)
            ticks.append({fp: dataclasses.asdict(a) for fp, a in engine.lifecycle.alerts.items()})
    await engine.stop()
    jobs.sweep(float("inf"))
    return ticks, sorted(jobs.finished, key=lambda r: r.key)


def _same_jobs(fresh: list[JobRecord], changed: list[JobRecord]) -> None:
    """The same records; the sums added up per stretch instead of per sample, so equal to rounding."""
    assert [r.key for r in changed] == [r.key for r in fresh]
    for a, b in zip(fresh, changed, strict=True):
        same = dataclasses.replace(b, gpu_hours=a.gpu_hours, mean_util=a.mean_util, waste_pct=a.waste_pct)
        assert same == a
        assert b.gpu_hours == pytest.approx(a.gpu_hours, rel=1e-9)
        assert (b.mean_util is None) == (a.mean_util is None)
        assert (b.waste_pct is None) == (a.waste_pct is None)
        if a.mean_util is not None:
            assert b.mean_util == pytest.approx(a.mean_util, rel=1e-9)
        if a.waste_pct is not None:
            assert b.waste_pct == pytest.approx(a.waste_pct, rel=1e-9, abs=1e-9)


def _corpus(case: corpus.Case) -> Callable[[], Iterator[sample.Snapshot]]:
    def snaps() -> Iterator[sample.Snapshot]:
        rng = random.Random(case.name)
        for t in range(corpus.DURATION):
            yield corpus.snapshot(case, t, rng)

    return snaps


@pytest.mark.parametrize("case", corpus.CASES, ids=[c.name for c in corpus.CASES])
def test_every_corpus_case_gives_the_same_alerts_and_jobs_through_the_wire(case: corpus.Case) -> None:
    snaps = _corpus(case)
    config = corpus.default_config()
    fresh = asyncio.run(_run(config, (("n1", s) for s in snaps()), corpus.DURATION))
    changed = asyncio.run(_run(config, (("n1", s) for s in _through_the_wire(snaps())), corpus.DURATION))
    assert changed[0] == fresh[0]
    assert any(fresh[0][-1].values()) or not case.expect, "the case raised its alerts"
    _same_jobs(fresh[1], changed[1])


def test_a_churning_fleet_gives_the_same_alerts_and_jobs_through_the_wire() -> None:
    """Every rule with short windows, three hosts whose processes change every few seconds."""
    config = Config(hosts=[HostConfig(name=f"h{h}") for h in range(3)],
                    rules=corpus.default_config().rules)
    for rule in config.rules.values():
        rule.params["for"] = min(float(rule.params["for"]), 30.0)
    config.rules["underused"].params["window"] = 40.0
    config.rules["stale"].params["no_session_idle"] = 30.0
    config.rules["idle_peers"].params["window"] = 30.0
    config.rules["input_bound"].params["window"] = 60.0
    seconds = 900
    fresh = asyncio.run(_run(config, churn.fleet(3, seconds, wire_path=False), 3 * seconds))
    changed = asyncio.run(_run(config, churn.fleet(3, seconds, wire_path=True), 3 * seconds))
    assert changed[0] == fresh[0]
    raised = {a["rule"] for tick in fresh[0] for a in tick.values()}  # type: ignore[index]
    assert {"wasted", "stale", "orphaned_memory", "idle", "underused", "input_bound"} <= raised, raised
    assert len(fresh[1]) > 20, "jobs came and went"
    _same_jobs(fresh[1], changed[1])
    # and what the records hold is what accounting.charge (the one owner) charges sample by sample
    held, wasted = _charged(config, churn.fleet(3, seconds, wire_path=False))
    got_held: dict[str, float] = {}
    got_wasted: dict[str, float] = {}
    for r in changed[1]:
        got_held[r.key] = got_held.get(r.key, 0.0) + r.gpu_hours * 3600
        got_wasted[r.key] = got_wasted.get(r.key, 0.0) + r.gpu_hours * 3600 * (r.waste_pct or 0.0) / 100
    assert sorted(got_held) == sorted(held)
    assert got_held == pytest.approx(held) and got_wasted == pytest.approx(wasted)
    assert sum(wasted.values()) > 0 and sum(held.values()) > sum(wasted.values())


def _charged(config: Config, feed: Feed) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds held and wasted per job key, charged sample by sample as accounting.charge says."""
    facts = FleetFacts(thresholds_of(config.rules))
    clocks: dict[tuple[str, str], GpuClock] = {}
    held: dict[str, float] = {}
    wasted: dict[str, float] = {}
    for host, snap in feed:
        for gf in facts.of(host, snap).gpus:
            g = gf.gpu
            if g.error is not None:
                continue
            seconds = clocks.setdefault((host, g.uuid), GpuClock()).tick(snap.ts) or 0.0
            c = charge(host, g, seconds, gf.waste, jobs=gf.jobs)
            for key, hours in c.jobs.items():
                held[key] = held.get(key, 0.0) + hours[0]
                wasted[key] = wasted.get(key, 0.0) + hours[2]
    return held, wasted
