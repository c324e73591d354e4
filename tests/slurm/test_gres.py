"""Which GPUs ``scontrol -o show job -d`` says a job holds on a node, in the forms Slurm prints.

Sources of the forms (SchedMD/slurm):
- the group: ``src/api/job_info.c`` ``slurm_sprint_job_info``:
  ``"  Nodes=%s CPU_IDs=%s Mem=%"PRIu64" GRES=%s"``, one group per run of nodes with the same allocation,
  the nodes as a ranged hostlist;
- the GRES details: ``src/slurmctld/gres_ctld.c`` ``gres_ctld_job_build_details`` (22.05, 23.x) and
  ``src/stepmgr/gres_stepmgr.c`` ``gres_stepmgr_job_build_details`` (later): ``"%s%s:%"PRIu64"(IDX:%s)"``
  (name[:type]:count, the bitmap as ``bit_fmt`` prints it), ``"%s%s(CNT:%"PRIu64")"`` without a bitmap, and
  (later releases) ``"%s%s:%"PRIu64"(%s)"`` with per-GPU counts for shared GRES (shard, mps);
- older releases: ``Nodes=gpu05 CPU_IDs=2-3 Mem=0 GRES_IDX=gpu(IDX:1-4)`` (as quoted by public job-monitoring
  scripts of the time).
The 22.05 record below is what Debian's 22.05.8 printed for the issue's job on tests/slurm/realslurm.py.
"""

from __future__ import annotations

import pytest
from gpufleet.agent.slurm import SlurmJob, parse_job
from gpufleet.agent.slurm_node import (
    SlurmParseError,
    allocation_groups,
    expand_hostlist,
    gpu_indexes,
    node_gpus,
    parse_bitmap,
)

#: Slurm 22.05.8, ``scontrol -o show job -d`` (one line; wrapped here only by the string concatenation)
REAL_2205 = (
    "JobId=342798 JobName=llama-pretrain UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 "
    "Nice=0 Account=nlp QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 DerivedExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-12-06T02:45:43 EligibleTime=2026-12-06T02:45:43 AccrueTime=2026-12-06T02:45:43 "
    "StartTime=2026-12-06T02:45:45 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-12-06T02:45:45 Scheduler=Main Partition=gpu AllocNode:Sid=localhost:23441 "
    "ReqNodeList=gft518c06 ExcNodeList=(null) NodeList=gft518c06 BatchHost=gft518c06 NumNodes=1 NumCPUs=1 "
    "NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:2   Nodes=gft518c06 CPU_IDs=0 Mem=0 "
    "GRES=gpu:2(IDX:0-1) MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp "
    "StdErr=/tmp/slurm-342798.out StdIn=/dev/null StdOut=/tmp/slurm-342798.out Power= TresPerNode=gres:gpu:2 "
)


def _record(groups: str, name: str = "train", tail: str = "") -> str:
    """A 23.x/24.x-shaped record with ``groups`` where Slurm prints them."""
    return (f"JobId=77 JobName={name} UserId=alice(1001) GroupId=alice(1001) Account=ml JobState=RUNNING "
            "Partition=h100 NodeList=gpu[01-04] NumNodes=4 CoreSpec=* JOB_GRES=gpu:h100:16 "
            f"{groups} MinCPUsNode=1 MinMemoryNode=0 Features=(null) Comment={tail} WorkDir=/home/alice")


def test_the_real_2205_record() -> None:
    assert allocation_groups(REAL_2205) == [("gft518c06", "gpu:2(IDX:0-1)")]
    assert node_gpus(REAL_2205, "gft518c06") == [0, 1]
    job = parse_job("342798", REAL_2205, "gft518c06")
    assert job == SlurmJob("342798", "llama-pretrain", "root", "nlp", "gpu", "RUNNING", (0, 1))


@pytest.mark.parametrize(("gres", "want"), [
    ("gpu:2(IDX:0-1)", [0, 1]),  # 20.02+
    ("gpu:a100:2(IDX:0,2)", [0, 2]),  # typed: name:type:count
    ("gpu:1g.10gb:1(IDX:5)", [5]),  # a MIG profile as the type
    ("gpu:4(IDX:0-1,4-5)", [0, 1, 4, 5]),  # ranges and lists together
    ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:2-3)", [0, 2, 3]),  # two types on one node
    ("gpu(IDX:1-4)", [1, 2, 3, 4]),  # the older GRES_IDX form, no count
    ("gpu:2(IDX:0-1),shard:4(2/10,2/10)", [0, 1]),  # shared GRES are not whole GPUs
    ("shard:2(2/10,0/10)", []),
    ("mps:50(50/100,0/100)", []),
    ("", []),  # a job without GRES on this node
    ("gpu:0(IDX:N/A)", []),
    ("gpu(CNT:2)", None),  # GPUs held, indexes not printed: unknown, never "none"
])
def test_gres_detail_forms(gres: str, want: list[int] | None) -> None:
    assert gpu_indexes(gres) == want


def test_bitmaps_and_hostlists() -> None:
    assert parse_bitmap("0-2,7") == [0, 1, 2, 7]
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand_hostlist("n9") == ["n9"]
    for bad in ("0-x", "3-1", "99999"):
        with pytest.raises(SlurmParseError):
            parse_bitmap(bad)
    with pytest.raises(SlurmParseError):
        expand_hostlist("n[a-b]")


def test_the_group_of_this_node_in_a_multi_node_job() -> None:
    record = _record("Nodes=gpu[01-02] CPU_IDs=0-31 Mem=0 GRES=gpu:h100:4(IDX:0-3) "
                     "Nodes=gpu[03-04] CPU_IDs=0-15 Mem=0 GRES=gpu:h100:4(IDX:4-7)")
    assert node_gpus(record, "gpu02") == [0, 1, 2, 3]
    assert node_gpus(record, "gpu04") == [4, 5, 6, 7]
    assert node_gpus(record, "gpu09") is None  # not ours and the groups differ: unknown
    one = _record("Nodes=gpu[01-04] CPU_IDs=0-31 Mem=0 GRES=gpu:h100:4(IDX:0-3)")
    assert node_gpus(one, "other-name") == [0, 1, 2, 3]  # every node holds the same: a NodeName alias


def test_older_gres_idx_key() -> None:
    record = _record("Nodes=gpu05 CPU_IDs=2-3 Mem=0 GRES_IDX=gpu(IDX:1-4)")
    assert node_gpus(record, "gpu05") == [1, 2, 3, 4]


def test_no_detail_groups_means_unknown() -> None:
    """``show job`` without ``-d`` (or a pending job) prints no group: unknown, not "no GPUs"."""
    assert node_gpus(_record(""), "gpu01") is None


def test_a_job_name_or_comment_cannot_forge_an_allocation() -> None:
    forged = "x Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)"
    record = _record("Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3)", name=forged, tail=forged)
    assert allocation_groups(record) == [("gpu01", "gpu:1(IDX:3)")]
    job = parse_job("77", record, "gpu01")
    assert job is not None and job.name == forged and job.gpus == (3,)
