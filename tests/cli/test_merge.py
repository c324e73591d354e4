"""Merging replicas' answers: a replica that has just reconnected (up, greeted, not sampled yet) must not
hide the GPUs its twin sees; the merged totals are counted from the merged hosts (CI caught a 24-vs-28 GPU
count when the freshest-``last_seen`` replica had no sample yet)."""

from __future__ import annotations

import json

from gpufleet.cli.merge import merge
from gpufleet.collector.model.codec import plain
from gpufleet.collector.model.summary import fleet_totals
from gpufleet.collector.model.views import FleetView, GpuView, HostView


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


# ------------------------------------------------------------------------------------------- report


def _report(rows: list[tuple[str, str, float]], shard: str | None, observed: float) -> dict:
    """One collector's report answer as `report --format json` gives it (held, half of it used)."""
    from gpufleet.collector.fleet.report import _assemble, render_report
    from gpufleet.collector.model.records import UsageRow

    rep = _assemble(since=0.0, until=3600.0, host=None, observed=observed, free=0.0, alerts=[], faults={},
                    generated_at=1.0,
                    rows=[UsageRow(u, h, held, held / 2, held / 4) for u, h, held in rows])
    return {"text": render_report(rep, "json"), "shard": shard, "format": "json"}


def test_report_round_trips_through_its_json() -> None:
    from gpufleet.collector.fleet.report import (
        UsageLine,
        _assemble,
        merge_reports,
        render_report,
        report_from_dict,
    )
    from gpufleet.collector.model.records import UsageRow

    rep = _assemble(since=0.0, until=7200.0, host=None, observed=10.0, free=2.5, alerts=[],
                    faults={"n1": {"xid": 2}}, generated_at=5.0,
                    rows=[UsageRow("alice", "n1", 3.0, 2.0, 0.5), UsageRow("bob", "n2", 1.0, 0.1, 0.9)],
                    slurm={"account": [UsageLine("nlp", 3.0, 2.0, 0.5)],
                           "partition": [UsageLine("a100", 4.0, 2.1, 1.4)]})
    again = report_from_dict(json.loads(render_report(rep, "json")))
    assert "By Slurm account" in render_report(again)
    for fmt in ("text", "markdown", "json"):
        assert render_report(again, fmt) == render_report(rep, fmt)
    twice = merge_reports([rep, again])
    assert twice.slurm["account"][0].held == 6.0 and twice.slurm["partition"][0].name == "a100"


def test_report_sums_shards_and_takes_one_answer_per_shard() -> None:
    s1 = [("alice", "n1", 2.0), ("bob", "n1", 1.0)]
    s2 = [("alice", "n2", 4.0)]
    answers = [_report(s1, "1/2", 3.0), _report([("alice", "n1", 1.5)], "1/2", 2.0),  # a younger replica
               _report(s2, "2/2", 4.0), _report(s2, "2/2", 4.0)]
    out = merge("report", answers, {"format": "json"})
    doc = json.loads(out["text"])
    assert out["shards"] == 2
    assert doc["total"]["gpu_hours_held"] == 7.0  # 3 + 4: no replica counted twice
    assert {u["name"]: u["gpu_hours_held"] for u in doc["by_user"]} == {"alice": 6.0, "bob": 1.0}
    assert {h["name"]: h["gpu_hours_held"] for h in doc["by_host"]} == {"n1": 3.0, "n2": 4.0}
    assert doc["capacity"]["gpu_hours_observed"] == 7.0
    text = merge("report", answers, {"format": "text"})["text"]
    assert text.splitlines()[2].startswith("7.00 GPU-hours held")


def test_report_without_shard_ids_treats_answers_over_the_same_hosts_as_replicas() -> None:
    a = [("alice", "n1", 2.0)]
    answers = [_report(a, None, 2.0), _report(a, None, 2.0), _report([("bob", "n9", 1.0)], None, 1.0)]
    out = merge("report", answers, {"format": "json"})
    assert json.loads(out["text"])["total"]["gpu_hours_held"] == 3.0


def test_maintenance_windows_one_per_host_across_replicas_and_shards() -> None:
    """Replicas of a shard each keep their own copy of a host's window (ids and start times differ by the
    request's travel): one line per host, the latest; shards add theirs. ``--all`` keeps every window."""
    def window(host: str, starts: float, wid: int) -> dict[str, object]:
        return {"host": host, "starts_at": starts, "ends_at": starts + 3600, "created_by": "root",
                "comment": "upgrade", "silence_id": wid, "id": wid}

    replica_a = [window("n1", 100.0, 7), window("n10", 100.0, 8)]
    replica_b = [window("n10", 100.2, 3), window("n1", 100.1, 4)]
    other_shard = [window("n2", 100.0, 1)]
    for op in ("maintenance_start", "maintenance_list", "maintenance_stop"):
        merged = merge(op, [replica_a, replica_b, other_shard], {})
        assert [(w["host"], w["id"]) for w in merged] == [("n1", 4), ("n2", 1), ("n10", 3)], op
    everything = merge("maintenance_list", [replica_a, replica_b], {"include_ended": True})
    assert len(everything) == 4
