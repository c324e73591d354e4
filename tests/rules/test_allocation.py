"""The one definition of "allocated but unused" (collector/model/allocation.py) and what reads it the same
way: free capacity (classify), the GPU-hours charge (accounting), the flags of an alert naming several GPUs
(firing) and the GPU-list notation (gpulist)."""

from __future__ import annotations

import pytest
from gpufleet.collector.fleet.accounting import allocation_charge
from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import allocated_indexes, use_of, uses
from gpufleet.collector.model.classify import gpu_state, is_free
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.gpulist import fmt_indexes, parse_indexes

from tests.builders import alert, gpu, lost_gpu, proc, snap


def _alloc(job: str, gpus: list[int], state: str = "RUNNING") -> sample.SlurmAllocation:
    return sample.SlurmAllocation(job=job, gpu_indexes=gpus, user="alice", account="nlp", state=state)


def _host() -> sample.Snapshot:
    """GPU 0: job 812's rank; GPU 1: nothing; GPU 2: another job's process; GPU 3: process list unreadable;
    GPU 4: lost."""
    unreadable = gpu(3, util=0, mem=0)
    unreadable.processes_error = "NVML: Unknown Error"
    s = snap(gpu(0, util=90, procs=[proc(1, job="812")]), gpu(1, util=0, mem=0),
             gpu(2, util=50, procs=[proc(2, "bob", job="900")]), unreadable, lost_gpu(4))
    s.allocations = [_alloc("812", [0, 1, 2, 3, 4, 9, 1]), _alloc("77", [1], state="SUSPENDED")]
    return s


def test_used_unused_and_not_judged() -> None:
    s = _host()
    [use] = uses(s)  # the suspended job does not count
    assert use.job == "812" and use.allocated == (0, 1, 2, 3, 4, 9)  # sorted, repeats dropped
    assert use.used == (0,)
    # GPU 2 runs another job's process: unused by 812; 3 (unreadable), 4 (lost), 9 (no such GPU): unknown
    assert use.unused == (1, 2)
    assert allocated_indexes(s) == frozenset({0, 1, 2, 3, 4, 9})
    assert use_of(_alloc("5", [1]), s.gpus).unused == (1,)


def test_a_gpu_a_running_job_holds_is_not_free_capacity() -> None:
    empty = gpu(1, util=0, mem=0)
    assert is_free(empty) and gpu_state(empty) == "idle"
    assert not is_free(empty, allocated=True) and gpu_state(empty, allocated=True) == "unused"
    busy = gpu(0, util=90, procs=[proc(1, job="812")])
    assert gpu_state(busy, allocated=True) == "busy"


def test_allocated_and_unused_seconds() -> None:
    [use] = uses(_host())
    seconds = {0: 1.0, 1: 1.0, 2: 0.5, 3: 1.0}  # GPU 4 lost: no clock tick; GPU 9: not a GPU here
    assert allocation_charge(use, seconds) == {0: (1.0, 0.0), 1: (1.0, 1.0), 2: (0.5, 0.5), 3: (1.0, 0.0)}
    assert allocation_charge(use, {0: 0.0, 1: 0.0}) == {}  # a replayed sample charges nothing


@pytest.mark.parametrize("indexes, text", [([], ""), ([3], "3"), ([0, 1], "0-1"), ([2, 0, 3, 1, 1], "0-3"),
                                            ([0, 2, 3, 7], "0,2-3,7")])
def test_gpu_lists_as_slurm_writes_them(indexes: list[int], text: str) -> None:
    assert fmt_indexes(indexes) == text
    assert parse_indexes(text) == sorted(set(indexes))


def test_a_label_from_elsewhere_never_breaks_a_reader() -> None:
    assert parse_indexes("1,x,3-,-2,4-5, 6 ,0-999999") == [1, 4, 5, 6]


def test_an_alert_naming_several_gpus_flags_each_of_them() -> None:
    firing = Firing([alert("allocated_unused", "n3", None, gpus="1,3-4", job="812"),
                     alert("wasted", "n3", 0), alert("host_down", "n4")])
    assert firing.on("n3", 1) == firing.on("n3", 3) == firing.on("n3", 4) == {"allocated_unused"}
    assert firing.on("n3", 2) == set() and firing.on("n3", None) == set()
    assert firing.on("n4", None) == {"host_down"}
    assert firing.gpus() == {("n3", 0): {"wasted"}, ("n3", 1): {"allocated_unused"},
                             ("n3", 3): {"allocated_unused"}, ("n3", 4): {"allocated_unused"}}
