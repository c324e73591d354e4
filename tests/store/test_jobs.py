"""Per-job efficiency records: the JobTracker on hand-built 1 Hz snapshots, saved in a real store (schema
v4) and read back."""

from __future__ import annotations

import functools
import sqlite3

import pytest
from gpufleet.agent import wire
from gpufleet.collector.fleet.jobs import GONE_INTERVALS, QUIET_AFTER, JobTracker
from gpufleet.collector.model import sample
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.store import schema
from gpufleet.collector.store.store import Store

from tests import builders
from tests.builders import GIB, alert, snap

#: a Slurm-like job's process: 10 GiB, started at t=100, a child of its launcher
JOB_PROC = {"mem_gib": 10.0, "start": 100.0, "command": "python train.py", "ppid": 50, "state": "S"}


gpu = functools.partial(builders.gpu, host="n1")
proc = functools.partial(builders.proc, **JOB_PROC)


async def test_a_job_across_two_hosts_is_recorded_once_when_it_releases_its_gpus(store: Store) -> None:
    firing = Firing([alert("idle_peers", "n2", 0), alert("wasted", "n2", 0)])
    tracker = JobTracker(store.save_jobs, firing=lambda: firing)
    for t in range(1000, 1601):  # 10 minutes: n1 computes (90 %, peak 99), n2's GPU idles (0 %)
        tracker.frame("n1", snap(gpu(0, util=99 if t == 1300 else 90, procs=[proc(1, job="77", mem_gib=30)]),
                                 ts=t), t)
        tracker.frame("n2", snap(gpu(0, util=0, procs=[proc(2, job="77", mem_gib=2)], host="n2"), ts=t), t)
    assert not tracker.finished
    for t in range(1601, 1601 + GONE_INTERVALS + 2):  # released: both hosts report the GPUs empty
        tracker.frame("n1", snap(gpu(0, util=0, procs=[]), ts=t), t)
        tracker.frame("n2", snap(gpu(0, util=0, procs=[], host="n2"), ts=t), t)
    await tracker.drain()
    [rec] = await store.jobs(since=0, until=10_000)
    assert rec.key == "slurm:77" and rec.user == "alice" and rec.hosts == ["n1", "n2"]
    assert rec.gpus == ["n1:0", "n2:0"] and rec.started == 100.0 and rec.ended == 1600
    assert rec.gpu_hours == pytest.approx(2 * 600 / 3600)
    assert rec.mean_util == pytest.approx(45.0, abs=0.2) and rec.peak_util == 99
    assert rec.peak_memory == 30 * GIB
    assert rec.waste_pct == pytest.approx(50.0, abs=0.2), "n2's idle GPU is half the job's GPU time"
    assert rec.diagnoses == ["idle_peers", "wasted"]
    assert tracker.jobs == {}


async def test_jobs_are_told_apart_and_filtered(store: Store) -> None:
    tracker = JobTracker(store.save_jobs)
    for t in range(0, 60):
        tracker.frame("n1", snap(gpu(0, util=50, procs=[proc(10, user="bob", start=5.0)]),
                                 gpu(1, util=0, procs=[proc(11, start=6.0)]), ts=t), t)
    for t in range(60, 70):  # pid 10 ends; pid 11 keeps its GPU
        tracker.frame("n1", snap(gpu(0, util=0, procs=[]), gpu(1, util=0, procs=[proc(11, start=6.0)]), ts=t),
                      t)
    await tracker.drain()
    rows = await store.jobs(since=0, until=1000)
    assert [(r.key, r.user) for r in rows] == [("pid:10.5@n1", "bob")]
    assert rows[0].waste_pct == 0.0 and rows[0].mean_util == pytest.approx(50.0)
    assert await store.jobs(since=0, until=1000, user="alice") == []
    # pid 11's host goes quiet: the sweep ends the job QUIET_AFTER after its last sighting
    quiet = 70 + QUIET_AFTER + 1
    tracker.frame("n9", sample.Heartbeat(proto=wire.PROTO_VERSION, ts=quiet), quiet)
    await tracker.drain()
    [alice] = await store.jobs(since=0, until=10_000, user="alice")
    assert alice.key == "pid:11.6@n1" and alice.ended == 69 and alice.waste_pct == pytest.approx(100.0)


async def test_schema_v4_has_the_jobs_table(store: Store) -> None:
    conn = sqlite3.connect(store.path)
    try:
        assert schema.LATEST >= 4 and schema.user_version(conn) == schema.LATEST
        cols = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
    finally:
        conn.close()
    assert {"job_key", "user", "hosts", "gpus", "started", "ended", "gpu_hours", "mean_util", "peak_util",
            "peak_memory", "waste_pct", "diagnoses"} <= set(cols)


async def test_job_records_are_kept_as_long_as_hourly_rollups(store: Store) -> None:
    from gpufleet.collector.model.records import JobRecord

    year = store.config.hour_retention
    await store.save_jobs([JobRecord(key="slurm:1", user="a", started=0.0, ended=100.0),
                           JobRecord(key="slurm:2", user="a", started=0.0, ended=year + 500.0)])
    await store.run_maintenance(year + 200.0)
    assert [r.key for r in await store.jobs(since=0, until=2 * year)] == ["slurm:2"]


async def test_an_unknown_process_list_does_not_end_a_job(store: Store) -> None:
    """A sample whose process list the agent could not read (agent 1.2 ``processes_error``) is no evidence
    that the job's processes left: the job goes on, and ends only when a readable list no longer shows it."""
    tracker = JobTracker(store.save_jobs)
    for t in range(0, 30):
        tracker.frame("n1", snap(gpu(0, util=80, procs=[proc(10, job="5")]), ts=t), t)
    for t in range(30, 30 + 10 * GONE_INTERVALS):
        tracker.frame("n1", snap(gpu(0, util=80, processes_error="NVML_ERROR_UNKNOWN"), ts=t), t)
    await tracker.drain()
    assert await store.jobs(since=0, until=10_000) == [] and list(tracker.jobs) == ["slurm:5"]
    end = 30 + 10 * GONE_INTERVALS
    for t in range(end, end + GONE_INTERVALS + 2):
        tracker.frame("n1", snap(gpu(0, util=0, procs=[]), ts=t), t)
    await tracker.drain()
    [rec] = await store.jobs(since=0, until=10_000)
    assert rec.key == "slurm:5" and rec.ended == end - 1
