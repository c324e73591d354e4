"""Merging replicas' answers: a replica that has just reconnected (up, greeted, not sampled yet) must not
hide the GPUs its twin sees; the merged totals are counted from the merged hosts (CI caught a 24-vs-28 GPU
count when the freshest-``last_seen`` replica had no sample yet)."""

from __future__ import annotations

from gpufleet.cli.merge import merge
from gpufleet.collector.api import plain
from gpufleet.collector.query import FleetView, GpuView, HostView, fleet_totals


def _gpu(i: int) -> GpuView:
    return GpuView(index=i, uuid=f"GPU-{i}", name="A100", state="busy", util=90, mem_used=1, mem_total=2,
                   temp=50, power=100.0, power_limit=300.0)


def _view(host: HostView) -> dict:
    return plain(FleetView(generated_at=host.last_seen or 0.0, source="live", hosts=[host],
                           totals=fleet_totals([host])))


def test_a_sampled_replica_wins_over_a_newer_one_without_a_sample() -> None:
    sampled = HostView(name="n1", status="up", reason=None, last_seen=100.0, age=0.0, sample_ts=100.0,
                       gpus=[_gpu(0), _gpu(1)])
    greeted = HostView(name="n1", status="up", reason=None, last_seen=101.0, age=0.0, sample_ts=None)
    for order in ((sampled, greeted), (greeted, sampled)):
        out = merge("status", [_view(h) for h in order])
        assert [len(h["gpus"]) for h in out["hosts"]] == [2]
        assert out["totals"]["gpus"] == 2 and out["totals"]["hosts_up"] == 1


def test_among_sampled_replicas_the_newest_wins_and_up_beats_down() -> None:
    old = HostView(name="n1", status="up", reason=None, last_seen=100.0, age=0.0, sample_ts=100.0,
                   gpus=[_gpu(0)])
    new = HostView(name="n1", status="up", reason=None, last_seen=105.0, age=0.0, sample_ts=105.0,
                   gpus=[_gpu(0), _gpu(1), _gpu(2)])
    down = HostView(name="n1", status="down", reason="timeout", last_seen=110.0, age=0.0, sample_ts=110.0,
                    gpus=[_gpu(0)])
    out = merge("status", [_view(h) for h in (old, down, new)])
    assert out["hosts"][0]["last_seen"] == 105.0 and out["totals"]["gpus"] == 3
