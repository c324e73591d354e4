"""The agent against a real Slurm (Debian's slurmctld, slurmd, munged on 127.0.0.1; tests/slurm/realslurm.py):
job names from the real ``scontrol``, the job id from the real freezer cgroup, and the GPUs Slurm gave each
job, used or not.

The job of issue 37: ``sbatch --gres=gpu:2 -J llama-pretrain -A nlp --wrap 'sleep 600'`` holds GPUs 0-1
(``GRES=gpu:2(IDX:0-1)``); the fake libnvidia-ml.so.1 lists its real ``sleep`` on GPU 0 only. A second job
holds a GPU and runs nothing on any: only Slurm knows it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpufleet.agent import wire
from gpufleet.agent.slurm import Scontrol
from gpufleet.agent.slurm_node import NodeJobs

from tests import realagent
from tests.fakenvml import fakelib
from tests.slurm.realslurm import SlurmCluster

GIB = 1 << 30


@dataclass(frozen=True)
class Job:
    job_id: str
    pid: int  # the job step's real ``sleep``


@pytest.fixture(scope="module")
def llama(slurm_cluster: SlurmCluster) -> Iterator[Job]:
    job_id = slurm_cluster.sbatch("--gres=gpu:2", "-J", "llama-pretrain", "-A", "nlp", "--wrap", "sleep 600")
    slurm_cluster.wait_state(job_id, "RUNNING")
    yield Job(job_id, slurm_cluster.wait_pid(job_id, "sleep"))
    slurm_cluster.run("scancel", job_id, check=False)


def _state(path: Path, pid: int) -> Path:
    """Four idle GPUs; GPU 0 runs ``pid`` with 10 GiB."""
    state: dict[str, Any] = fakelib.default_state(4)
    state["gpus"][0].update(util=35, mem_used=10 * GIB, processes=[{"pid": pid, "mem": 10 * GIB, "sm": 30}])
    return fakelib.write_state(path, state)


def _agent_args(cluster: SlurmCluster) -> tuple[str, ...]:
    return ("--interval", "0.2", "--slurm-node", cluster.node, "--slurm-list-every", "0.5",
            "--scontrol", shutil.which("scontrol") or "scontrol")


def _allocation(snap: wire.Snapshot, job_id: str) -> wire.SlurmAllocation | None:
    return next((a for a in snap.allocations if a.job == job_id), None)


def test_the_job_step_runs_in_the_real_freezer_cgroup(slurm_cluster: SlurmCluster, llama: Job) -> None:
    """What the agent's attribution rests on: proctrack/cgroup put the step in ``.../job_<id>/step_batch``."""
    cgroup = Path(f"/proc/{llama.pid}/cgroup").read_text()
    if slurm_cluster.cgroup == 1:
        assert f"freezer:/slurm_{slurm_cluster.node}/uid_0/job_{llama.job_id}/step_batch" in cgroup
    else:
        assert f"slurmstepd.scope/job_{llama.job_id}/step_batch" in cgroup


def test_real_scontrol_names_the_job_and_its_gpus(slurm_cluster: SlurmCluster, llama: Job,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    record = slurm_cluster.job(llama.job_id)
    assert f"Nodes={slurm_cluster.node} CPU_IDs=" in record and "GRES=gpu:2(IDX:0-1)" in record
    job = Scontrol("scontrol", node=slurm_cluster.node)(llama.job_id)
    assert job is not None
    assert (job.name, job.user, job.account, job.partition, job.state, job.gpus) == (
        "llama-pretrain", "root", "nlp", "gpu", "RUNNING", (0, 1))
    assert Scontrol("scontrol", node=slurm_cluster.node)("999999999") is None  # "Invalid job id"


def test_frames_name_the_job_and_say_gpu_1_is_allocated_and_unused(
        slurm_cluster: SlurmCluster, llama: Job, fake_nvml_lib: Path, tmp_path: Path) -> None:
    state = _state(tmp_path / "nvml.state", llama.pid)
    with realagent.streaming(fake_nvml_lib, state, *_agent_args(slurm_cluster), env=slurm_cluster.env,
                             stderr=tmp_path / "agent.err") as agent:
        snap = agent.snapshot_where(
            lambda s: bool(s.gpus[0].processes and s.gpus[0].processes[0].job_name
                           and _allocation(s, llama.job_id)))
    p = snap.gpus[0].processes[0]
    assert (p.pid, p.user, p.job, p.job_name, p.job_user, p.job_account, p.job_partition, p.job_state) == (
        llama.pid, "root", llama.job_id, "llama-pretrain", "root", "nlp", "gpu", "RUNNING")
    alloc = _allocation(snap, llama.job_id)
    assert alloc == wire.SlurmAllocation(job=llama.job_id, gpu_indexes=[0, 1], name="llama-pretrain",
                                         user="root", account="nlp", partition="gpu", state="RUNNING")
    held = {g.index for g in snap.gpus if any(q.job == llama.job_id for q in g.processes)}
    assert held == {0}
    assert set(alloc.gpu_indexes) - held == {1}  # allocated to llama-pretrain, and unused
    assert snap.gpus[1].processes == [] and snap.gpus[1].memory_used == 0


def test_a_job_that_never_touches_a_gpu_is_seen_and_dropped_when_it_ends(
        slurm_cluster: SlurmCluster, llama: Job, fake_nvml_lib: Path, tmp_path: Path) -> None:
    """No process of this job is on any GPU: the agent finds it in the node's job cgroups, asks scontrol,
    and stops reporting it once Slurm has ended it."""
    idle = slurm_cluster.sbatch("--gres=gpu:1", "-J", "idle notebook", "-A", "vision", "--wrap", "sleep 600")
    slurm_cluster.wait_state(idle, "RUNNING")
    state = _state(tmp_path / "nvml.state", llama.pid)
    with realagent.streaming(fake_nvml_lib, state, *_agent_args(slurm_cluster), env=slurm_cluster.env,
                             stderr=tmp_path / "agent.err") as agent:
        snap = agent.snapshot_where(lambda s: _allocation(s, idle) is not None)
        alloc = _allocation(snap, idle)
        assert alloc is not None
        assert (alloc.gpu_indexes, alloc.name, alloc.user, alloc.account, alloc.state) == (
            [2], "idle notebook", "root", "vision", "RUNNING")
        assert not any(p.job == idle for g in snap.gpus for p in g.processes)
        slurm_cluster.run("scancel", idle)
        slurm_cluster.wait_state(idle, "CANCELLED")
        after = agent.snapshot_where(lambda s: _allocation(s, idle) is None)
    assert _allocation(after, llama.job_id) is not None  # the other job is still reported


def test_jobs_on_the_node_from_the_cgroup_tree_else_squeue(
        slurm_cluster: SlurmCluster, llama: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    run = Scontrol("scontrol").output
    squeue = shutil.which("squeue")
    from_cgroups = NodeJobs(run, squeue, slurm_cluster.node, "/sys/fs/cgroup")
    assert llama.job_id in from_cgroups() and from_cgroups.source == "cgroup"
    other_node = NodeJobs(run, squeue, "gft-no-such-node", tmp_path)  # no Slurm cgroup tree: squeue
    with pytest.raises(Exception, match="exited"):
        other_node()  # squeue refuses a node it does not know
    from_squeue = NodeJobs(run, squeue, slurm_cluster.node, tmp_path)
    assert llama.job_id in from_squeue() and from_squeue.source == "squeue"
    assert os.path.isdir(f"/proc/{llama.pid}")
