"""Slurm jobs in the store (schema v5): migrating a real v4 file, rows written only on change, GPU-hours
per account and partition with the users' one definition of waste."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from gpufleet.collector.model import sample
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import schema
from gpufleet.collector.store.store import Store

from tests.builders import gpu, old_schema_file, proc, snap


def _v4_file(path: Path) -> None:
    """A file exactly as the previous gpufleet left it: migrations v1..v4 only, with data in it."""
    conn = old_schema_file(path, 4)
    conn.execute("INSERT INTO hosts (name) VALUES ('n1')")
    conn.execute("INSERT INTO gpus (uuid, host_id, idx, first_seen, last_seen) "
                 "VALUES ('GPU-0000', 1, 0, 1, 1)")
    conn.execute("INSERT INTO usage VALUES (0, 1, 1, 'alice', 3600, 1800, 0)")
    conn.close()


def _slurm_proc(pid: int, job: str, owner: str = "alice", **slurm: str) -> sample.ProcessSample:
    return proc(pid, owner, job=job, **{f"job_{k}": v for k, v in slurm.items()})


async def test_a_v4_file_migrates_and_keeps_its_data(config: StorageConfig) -> None:
    path = config.resolved_path()
    _v4_file(path)
    s = await Store.open(config)
    try:
        rows = await s.usage_by_user(since=0, until=3600)
        assert [(r.user, r.gpu_hours_held) for r in rows] == [("alice", 1.0)]
        assert await s.slurm_usage("account", since=0, until=3600) == []
    finally:
        await s.close()
    with sqlite3.connect(path) as conn:
        assert schema.user_version(conn) == schema.LATEST >= 5
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        assert {"slurm_jobs", "slurm_usage"} <= tables


async def test_jobs_are_written_on_change_and_grouped_by_account_and_partition(store: Store) -> None:
    facts = {"name": "train-llm", "user": "alice", "account": "nlp", "partition": "h100", "state": "RUNNING"}
    for t in range(1000, 1100):
        # job 7 resolves at t=1010; job 8 never does; the agent's own user name wins for usage
        seven = _slurm_proc(1, "7", **(facts if t >= 1010 else {}))
        store.submit_snapshot("n1", snap(gpu(0, util=90, procs=[seven]),
                                         gpu(1, util=0, procs=[_slurm_proc(2, "8", "bob")]), ts=t), t)
    await store.flush()
    jobs = await store.slurm_jobs([("n1", "7"), ("n1", "8"), ("n1", "9")])
    seven = jobs[("n1", "7")]
    assert (seven.name, seven.user, seven.account, seven.partition, seven.state) == (
        "train-llm", "alice", "nlp", "h100", "RUNNING")
    assert seven.first_seen == 1000 and seven.last_seen >= 1060
    assert jobs[("n1", "8")].name is None and ("n1", "9") not in jobs

    by_account = await store.slurm_usage("account", since=0, until=3600)
    assert sorted(r.name for r in by_account) == ["(unresolved)", "nlp"]
    nlp = next(r for r in by_account if r.name == "nlp")
    idle = next(r for r in by_account if r.name == "(unresolved)")
    # named late, credited from its first sample
    assert nlp.gpu_hours_held == pytest.approx(99 / 3600) and nlp.gpu_hours_wasted == 0
    assert nlp.gpu_hours_used == pytest.approx(0.9 * 99 / 3600)
    # bob's idle GPU: the same seconds the user table calls wasted
    users = {u.user: u for u in await store.usage_by_user(since=0, until=3600)}
    assert idle.gpu_hours_wasted == pytest.approx(users["bob"].gpu_hours_wasted) and idle.gpu_hours_wasted > 0
    parts = {r.name: r for r in await store.slurm_usage("partition", since=0, until=3600, host="n1")}
    assert set(parts) == {"h100", "(unresolved)"} and parts["h100"].jobs == 1
    assert await store.slurm_usage("partition", since=0, until=3600, host="n2") == []


def test_rows_are_written_only_on_change() -> None:
    from gpufleet.collector.store.slurm import SEEN_EVERY, JobRow, SlurmSeen

    seen, rows = SlurmSeen(), dict[tuple[int, str], JobRow]()
    p = proc(1, job="7", job_name="a")
    seen.note(rows, 1, p, 1000.0)
    assert list(rows) == [(1, "7")]
    rows.clear()
    for t in range(1001, 1001 + int(SEEN_EVERY) - 2):
        seen.note(rows, 1, p, float(t))
    assert rows == {}  # unchanged: nothing to write
    seen.note(rows, 1, proc(1, job="7", job_name="a", job_state="COMPLETING"), 1060.0)
    assert rows[(1, "7")][6] == "COMPLETING"


async def test_a_finished_slurm_job_is_listed_under_its_name(store: Store) -> None:
    from gpufleet.cli.render_jobs import render_jobs
    from gpufleet.collector.model.records import JobRecord
    from rich.console import Console

    named = _slurm_proc(1, "7", name="train-llm", account="nlp", partition="h100")
    for t in range(1000, 1005):
        store.submit_snapshot("n1", snap(gpu(0, util=90, procs=[named]), ts=t), t)
    await store.flush()
    await store.save_jobs([JobRecord(key="slurm:7", user="alice", started=1000, ended=1004, hosts=["n1"],
                                     gpus=["n1:0"], gpu_hours=0.01),
                           JobRecord(key="pid:5.900@n1", user="bob", started=900, ended=1004, hosts=["n1"],
                                     gpus=["n1:1"])])
    jobs = {r.key: r for r in await store.jobs(since=0, until=2000)}
    assert (jobs["slurm:7"].slurm_name, jobs["slurm:7"].slurm_account, jobs["slurm:7"].slurm_partition) == (
        "train-llm", "nlp", "h100")
    assert jobs["pid:5.900@n1"].slurm_name is None
    console = Console(width=160, record=True, color_system=None)
    console.print(render_jobs([dataclasses.asdict(r) for r in jobs.values()], 160))
    text = console.export_text()
    assert "7 train-llm (nlp/h100)" in text and "pid 5" in text
