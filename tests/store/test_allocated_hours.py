"""GPU-hours Slurm allocated to a running job and the job left unused (issue 37), accounted once
(collector/fleet/accounting.py) and read back alike by the store's report sums and the job records: schema v7
on a real file, a v6 file migrated with its data, free capacity that leaves a job's GPUs out."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.fleet.jobs import GONE_INTERVALS, JobTracker
from gpufleet.collector.model import sample
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import schema
from gpufleet.collector.store.store import Store

from tests import builders
from tests.builders import old_schema_file, snap

gpu = functools.partial(builders.gpu, host="n3")


def _alloc(job: str, gpus: list[int], user: str, account: str,
           state: str = "RUNNING") -> sample.SlurmAllocation:
    return sample.SlurmAllocation(job=job, gpu_indexes=gpus, name=f"job-{job}", user=user, account=account,
                                  partition="gpu", state=state)


def _snapshot(t: float, allocations: list[sample.SlurmAllocation], **procs: Any) -> sample.Snapshot:
    """Four GPUs of n3 at 1 Hz: job 812 (alice, nlp) runs on GPU 0 and holds GPU 1 too; job 913 (bob,
    vision) holds GPU 2 and runs nothing; GPU 3 is no one's."""
    rank = builders.proc(7000, "alice", mem_gib=10.0, start=1.0, job="812", job_name="job-812")
    s = snap(gpu(0, util=80, procs=[rank]), *(gpu(i, util=0, mem=0) for i in (1, 2, 3)), ts=t)
    s.allocations = allocations
    return s


ALLOCATIONS = [_alloc("812", [0, 1], "alice", "nlp"), _alloc("913", [2], "bob", "vision")]


async def test_allocated_and_unused_hours_per_account_and_user(store: Store) -> None:
    for t in range(1000, 1361):  # six minutes at 1 Hz
        store.submit_snapshot("n3", _snapshot(t, ALLOCATIONS), t)
    await store.flush()
    accounts = {r.name: r for r in await store.slurm_usage("account", since=0, until=3600)}
    users = {r.name: r for r in await store.slurm_usage("user", since=0, until=3600)}
    six_minutes = 360 / 3600
    nlp, vision = accounts["nlp"], accounts["vision"]
    assert nlp.gpu_hours_allocated == pytest.approx(2 * six_minutes)  # two GPUs
    assert nlp.gpu_hours_unused == pytest.approx(six_minutes)  # GPU 1
    assert nlp.gpu_hours_held == pytest.approx(six_minutes) and nlp.jobs == 1
    # a job that never runs a process: named by its allocation, all of its GPU-hours unused
    assert (vision.gpu_hours_allocated, vision.gpu_hours_unused, vision.gpu_hours_held) == pytest.approx(
        (six_minutes, six_minutes, 0.0))
    assert users["alice"].gpu_hours_unused == nlp.gpu_hours_unused and set(users) == {"alice", "bob"}
    [row] = (await store.slurm_jobs([("n3", "913")])).values()
    assert (row.name, row.user, row.account, row.state) == ("job-913", "bob", "vision", "RUNNING")
    # free capacity: only GPU 3; GPU 1 and 2 sit unused but a job holds them
    [cap] = await store.capacity(since=0, until=3600)
    assert cap.gpu_hours_free == pytest.approx(six_minutes)
    assert cap.gpu_hours_observed == pytest.approx(4 * six_minutes)


async def test_a_suspended_job_holds_nothing(store: Store) -> None:
    for t in range(1000, 1061):
        store.submit_snapshot("n3", _snapshot(t, [_alloc("913", [2], "bob", "vision", state="SUSPENDED")]), t)
    await store.flush()
    assert all(r.gpu_hours_allocated == 0 for r in await store.slurm_usage("user", since=0, until=3600))
    [cap] = await store.capacity(since=0, until=3600)
    assert cap.gpu_hours_free == pytest.approx(3 * 60 / 3600)  # GPUs 1, 2, 3


async def test_job_records_have_their_gpus_as_used_of_allocated(store: Store) -> None:
    tracker = JobTracker(store.save_jobs)
    for t in range(1000, 1601):
        tracker.frame("n3", _snapshot(t, ALLOCATIONS), t)
    for t in range(1601, 1601 + GONE_INTERVALS + 2):  # both jobs end: Slurm no longer lists them
        tracker.frame("n3", snap(*(gpu(i, util=0, mem=0) for i in range(4)), ts=t), t)
    await tracker.drain()
    records = {r.key: r for r in await store.jobs(since=0, until=10_000)}
    llama, idle = records["slurm:812"], records["slurm:913"]
    assert (llama.gpus, llama.gpus_allocated) == (["n3:0"], ["n3:0", "n3:1"])
    assert llama.gpu_hours_allocated == pytest.approx(2 * 600 / 3600)
    assert llama.gpu_hours_unused == pytest.approx(600 / 3600)
    assert llama.gpu_hours == pytest.approx(600 / 3600) and llama.user == "alice"
    # the job that never ran a process has a record too: its user is Slurm's
    assert (idle.user, idle.gpus, idle.gpus_allocated, idle.gpu_hours) == ("bob", [], ["n3:2"], 0.0)
    assert idle.gpu_hours_unused == pytest.approx(idle.gpu_hours_allocated) and idle.gpu_hours_unused > 0


def _v6_file(path: Path) -> None:
    """A file as the previous gpufleet left it (migrations v1..v6) with Slurm usage and a job in it."""
    conn = old_schema_file(path, 6)
    conn.execute("INSERT INTO hosts (name) VALUES ('n1')")
    conn.execute("INSERT INTO gpus (uuid, host_id, idx, first_seen, last_seen) "
                 "VALUES ('GPU-0000', 1, 0, 1, 1)")
    conn.execute("INSERT INTO slurm_jobs VALUES (1, '7', 'train', 'alice', 'nlp', 'gpu', 'RUNNING', 0, 10)")
    conn.execute("INSERT INTO slurm_usage VALUES (0, 1, 1, '7', 3600, 1800, 0)")
    conn.execute("INSERT INTO jobs (job_key, user, hosts, gpus, started, ended, gpu_hours, diagnoses) "
                 "VALUES ('slurm:7', 'alice', '[\"n1\"]', '[\"n1:0\"]', 0, 3600, 1.0, '[]')")
    conn.close()


async def test_a_v6_file_migrates_and_keeps_its_data(config: StorageConfig) -> None:
    path = config.resolved_path()
    _v6_file(path)
    s = await Store.open(config)
    try:
        [nlp] = await s.slurm_usage("account", since=0, until=3600)
        assert (nlp.name, nlp.gpu_hours_held, nlp.gpu_hours_allocated, nlp.gpu_hours_unused) == (
            "nlp", 1.0, 0.0, 0.0)
        [job] = await s.jobs(since=0, until=10_000)
        assert (job.key, job.gpus_allocated, job.gpu_hours_allocated) == ("slurm:7", [], 0.0)
    finally:
        await s.close()
    with sqlite3.connect(path) as conn:
        assert schema.user_version(conn) == schema.LATEST >= 7
