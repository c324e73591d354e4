"""The resolver's view of the jobs holding GPUs on this node: listing, lookups, what it reports and when it
stops. Time is an injected clock; the lookups are a dict (the real scontrol: tests/slurm/test_real_slurm.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from gpufleet.agent.slurm import FOUND_TTL, SlurmJob, SlurmLookupError, SlurmResolver, resolver_for
from gpufleet.agent.slurm_node import NodeJobs, cgroup_bases, cgroup_jobs, slurm_conf
from gpufleet.agent.wire import SlurmAllocation

from tests.builders import FakeClock


class Slurm:
    """Lookups and listings from dicts, counting calls."""

    def __init__(self) -> None:
        self.jobs: dict[str, SlurmJob] = {}
        self.on_node: set[str] = set()
        self.calls: list[str] = []
        self.list_fails = False

    def __call__(self, job_id: str) -> SlurmJob | None:
        self.calls.append(job_id)
        return self.jobs.get(job_id)

    def listing(self) -> set[str]:
        if self.list_fails:
            raise SlurmLookupError(
                "squeue exited 1: slurm_load_jobs error: Unable to contact slurm controller")
        return set(self.on_node)


def _job(job_id: str, gpus: tuple[int, ...] | None, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(job_id, f"job{job_id}", "alice", "nlp", "gpu", state, gpus)


def _resolve(r: SlurmResolver) -> None:
    while r.work_once(0):
        pass


def test_listed_jobs_are_looked_up_and_reported_with_their_gpus() -> None:
    slurm, clock = Slurm(), FakeClock()
    r = SlurmResolver(slurm, lister=slurm.listing, clock=clock, start=False)
    slurm.on_node = {"10", "9", "11", "12", "13"}
    slurm.jobs = {"9": _job("9", (2,)), "10": _job("10", (0, 1)), "11": _job("11", None),
                  "12": _job("12", ()), "13": _job("13", (3,), "COMPLETING")}
    assert r.allocations() == []  # listed, not looked up yet: nothing claimed
    assert r.list_once()
    _resolve(r)
    assert sorted(slurm.calls) == ["10", "11", "12", "13", "9"]
    got = r.allocations()
    assert [(a.job, a.gpu_indexes, a.state) for a in got] == [
        ("9", [2], "RUNNING"), ("10", [0, 1], "RUNNING"), ("13", [3], "COMPLETING")]
    assert got[1] == SlurmAllocation(job="10", gpu_indexes=[0, 1], name="job10", user="alice", account="nlp",
                                     partition="gpu", state="RUNNING")
    # a relisting does not look the jobs up again before FOUND_TTL
    clock.advance(30)
    assert r.list_once() and not r.work_once(0)
    clock.advance(FOUND_TTL)
    assert r.list_once() and r.work_once(0)


def test_a_job_seen_only_through_its_processes_is_reported_and_one_that_ended_is_not() -> None:
    slurm = Slurm()
    r = SlurmResolver(slurm, lister=slurm.listing, clock=FakeClock(), start=False)
    slurm.jobs = {"7": _job("7", (0,)), "8": _job("8", (1,), "CANCELLED")}
    r.get("7")
    r.get("8")
    _resolve(r)
    assert [a.job for a in r.allocations(["7", "8"])] == ["7"]  # CANCELLED holds nothing
    assert r.allocations() == []  # not listed, no process this sample: not on this node any more
    slurm.on_node = {"7"}
    r.list_once()
    assert [a.job for a in r.allocations()] == ["7"]
    slurm.on_node = set()  # the job ended: its cgroup is gone
    r.list_once()
    assert r.allocations() == []


def test_a_failed_listing_keeps_the_last_one_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    slurm = Slurm()
    r = SlurmResolver(slurm, lister=slurm.listing, clock=FakeClock(), start=False)
    slurm.on_node, slurm.jobs = {"5"}, {"5": _job("5", (0, 1))}
    r.list_once()
    _resolve(r)
    slurm.list_fails = True
    with caplog.at_level(logging.DEBUG, logger="gpufleet.agent.slurm"):
        assert not r.list_once() and not r.list_once()
    assert [a.job for a in r.allocations()] == ["5"]  # slurmctld down ends no job
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Unable to contact slurm controller" in warnings[0].getMessage()


def _mkdirs(root: Path, *paths: str) -> None:
    for p in paths:
        (root / p).mkdir(parents=True)


def test_jobs_from_a_cgroup_v1_tree(tmp_path: Path) -> None:
    """proctrack/cgroup (freezer) and task/cgroup (memory, devices) on cgroup v1; Debian's multiple-slurmd
    build names the base ``slurm_<node>``."""
    _mkdirs(tmp_path, "freezer/slurm/uid_1001/job_5/step_batch", "memory/slurm/uid_1001/job_5/step_0",
            "devices/slurm/uid_1002/job_6/step_extern", "freezer/slurm/system", "cpu/user.slice",
            "freezer/slurm_gpu07/uid_0/job_9/step_batch", "freezer/slurm_gpu08/uid_0/job_10")
    assert cgroup_jobs(cgroup_bases(tmp_path, None)) == {"5", "6", "9", "10"}
    assert cgroup_jobs(cgroup_bases(tmp_path, "gpu07")) == {"5", "6", "9"}  # not the other slurmd's


def test_jobs_from_a_cgroup_v2_tree(tmp_path: Path) -> None:
    """cgroup/v2 (22.05+): the stepds' scope under system.slice, ``<node>_slurmstepd.scope`` with
    multiple-slurmd."""
    _mkdirs(tmp_path, "system.slice/slurmstepd.scope/job_21/step_batch/user/task_0",
            "system.slice/slurmstepd.scope/job_22/step_extern", "system.slice/slurmstepd.scope/system",
            "system.slice/n3_slurmstepd.scope/job_30", "system.slice/sshd.service")
    assert cgroup_jobs(cgroup_bases(tmp_path, None)) == {"21", "22", "30"}
    assert cgroup_jobs(cgroup_bases(tmp_path, "n3")) == {"21", "22", "30"}
    assert cgroup_jobs(cgroup_bases(tmp_path, "n4")) == {"21", "22"}


def test_squeue_only_where_there_is_no_slurm_cgroup_tree(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        return "41\n42\n"

    lister = NodeJobs(run, "/opt/slurm/bin/squeue", "gpu07", tmp_path)
    assert lister() == {"41", "42"} and lister.source == "squeue"
    assert calls == [["/opt/slurm/bin/squeue", "-h", "-w", "gpu07", "-t", "R,S,CG", "-o", "%A"]]
    _mkdirs(tmp_path, "freezer/slurm/uid_0/job_43")
    assert lister() == {"43"} and lister.source == "cgroup" and len(calls) == 1
    assert NodeJobs(run, None, "gpu07", tmp_path / "none")() == set()  # neither: nothing, no call


def test_the_fake_backend_lists_no_node_jobs(tmp_path: Path) -> None:
    """resolver_for without a cgroup root (the fake backend): its job ids mean nothing to this host."""
    r = resolver_for("/bin/true")
    assert r is not None
    try:
        assert not r.list_once()
    finally:
        r.close()


def test_squeue_only_where_slurm_is_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unconfigured Slurm client asks DNS for its controller on every call: no squeue fallback there."""
    prefix = tmp_path / "opt-slurm"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "etc").mkdir()
    scontrol = prefix / "bin" / "scontrol"
    scontrol.write_text("#!/bin/sh\nexit 1\n")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    system = [p for p in ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/run/slurm/conf/slurm.conf")
              if Path(p).is_file()]
    if not system:
        assert slurm_conf(str(scontrol)) is None
    (prefix / "etc" / "slurm.conf").write_text("ClusterName=x\n")
    assert slurm_conf(str(scontrol)) == (Path(system[0]) if system else prefix / "etc" / "slurm.conf")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "mine.conf"))
    (tmp_path / "mine.conf").write_text("ClusterName=y\n")
    assert slurm_conf(str(scontrol)) == tmp_path / "mine.conf"


def test_a_changed_answer_reaches_the_next_allocations() -> None:
    """allocations() reuses its last answer only while neither the jobs nor Slurm's answers changed."""
    slurm, clock = Slurm(), FakeClock()
    r = SlurmResolver(slurm, lister=slurm.listing, clock=clock, start=False)
    slurm.on_node, slurm.jobs = {"5"}, {"5": _job("5", (0, 1))}
    r.list_once()
    _resolve(r)
    first = r.allocations()
    assert [(a.gpu_indexes, a.state) for a in first] == [([0, 1], "RUNNING")]
    assert r.allocations() == first
    slurm.jobs["5"] = _job("5", (0, 1), "SUSPENDED")
    clock.advance(FOUND_TTL)
    r.list_once()
    _resolve(r)
    assert [a.state for a in r.allocations()] == ["SUSPENDED"]
    slurm.jobs["5"] = _job("5", (0, 1), "CANCELLED")
    clock.advance(FOUND_TTL)
    r.list_once()
    _resolve(r)
    assert r.allocations() == []
