"""``allocated_unused`` through the real alert engine with a fake clock: a running Slurm job holds GPUs 0-1 of
n3 and runs on GPU 0 only (issue 37): pending for the default 10 minutes, then firing with the job, user,
account and idle GPUs named; the GPU never counts as idle capacity; resolved when the job uses it or ends."""

from __future__ import annotations

from typing import Any

from gpufleet.collector.model import sample

from tests.builders import lost_gpu

GIB = 1 << 30


def _alloc(job: str = "812", gpus: tuple[int, ...] = (0, 1), state: str = "RUNNING",
           **kw: Any) -> sample.SlurmAllocation:
    facts = {"name": "llama-pretrain", "user": "alice", "account": "nlp", "partition": "gpu", **kw}
    return sample.SlurmAllocation(job=job, gpu_indexes=list(gpus), state=state, **facts)


def _snap(w: Any, *, on: tuple[int, ...] = (0,), allocations: list[sample.SlurmAllocation] | None = None,
          unreadable: tuple[int, ...] = ()) -> sample.Snapshot:
    """GPUs 0 and 1 of n3; job 812's rank runs on each GPU in ``on``; ``unreadable``: no process list."""
    gpus = []
    for i in (0, 1):
        rank = w.proc(7000 + i, "alice", command="python pretrain.py", job="812", job_name="llama-pretrain")
        procs = [rank] if i in on else []
        g = w.gpu(i, util=90 if procs else 0, procs=procs, mem=None if procs else 0)
        if i in unreadable:
            g.processes, g.processes_error = [], "NVML: Unknown Error"
        gpus.append(g)
    s = w.snap(*gpus)
    s.allocations = [_alloc()] if allocations is None else allocations
    return s


async def test_the_job_that_holds_two_gpus_and_uses_one(harness, clock, w):
    h = harness()
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    for i in range(0, 600, 30):
        clock.t = t0 + i
        h.send(_snap(w))
        await h.tick()
    [pending] = h.engine.active()
    assert (pending.rule, pending.state) == ("allocated_unused", "pending")  # and never "idle" for GPU 1
    clock.t = t0 + 600
    h.send(_snap(w))
    await h.tick()
    [alert] = h.engine.active()
    assert alert.state == "firing" and alert.severity == "warning"
    assert alert.labels == {"host": "n3", "job": "812", "user": "alice", "account": "nlp", "gpus": "1",
                            "rule": "allocated_unused"}
    assert alert.annotations["summary"] == (
        "n3: Slurm job 812 llama-pretrain (alice, account nlp) holds GPUs 0-1 and has used only GPU 0 for 10m"
    )
    assert "keep the job as it is with `gpufleet silence add --host n3 --user alice --rule allocated_unused" \
        in alert.annotations["description"]
    assert (alert.annotations["slurm_job_name"], alert.annotations["slurm_partition"]) == (
        "llama-pretrain", "gpu")
    assert (alert.annotations["allocated"], alert.annotations["used"]) == ("0-1", "0")
    firing = h.engine.firing()
    assert firing.on("n3", 1) == {"allocated_unused"} and firing.on("n3", 0) == set()
    assert firing.on("n3", None) == set()  # the idle GPUs' alert, not the host's

    # one sample where GPU 1's process list could not be read: the verdict stands (no new alert)
    clock.t = t0 + 630
    h.send(_snap(w, unreadable=(1,)))
    await h.tick()
    assert [(a.fingerprint, a.state) for a in h.engine.active()] == [(alert.fingerprint, "firing")]

    # rank 1 starts on GPU 1
    clock.t = t0 + 900
    h.send(_snap(w, on=(0, 1)))
    await h.tick()
    assert h.engine.active() == []
    await h.tick(t0 + 1000)  # the group's next send (group_interval)
    resolved = [n for n in h.notifiers[0].got if n.status == "resolved"]
    assert resolved[-1].alerts[0].annotations["resolved"] == "Slurm job 812 on n3 now uses GPU 1 after 15m"


async def test_a_job_that_runs_nothing_and_then_ends(harness, clock, w):
    h = harness(w.config(rules={"allocated_unused": {"for": 60.0}}))
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    for i in (0, 30, 60):
        clock.t = t0 + i
        h.send(_snap(w, on=(), allocations=[_alloc("913", (1,), user="bob", account="vision",
                                                    name="idle notebook")]))
        await h.tick()
    # GPU 1 is not idle capacity (GPU 0, which no job holds, is pending idle)
    assert {(a.rule, a.state) for a in h.engine.active()} == {("allocated_unused", "firing"),
                                                               ("idle", "pending")}
    [alert] = [a for a in h.engine.active() if a.rule == "allocated_unused"]
    assert alert.labels["gpus"] == "1" and alert.labels["user"] == "bob"
    assert alert.annotations["summary"] == (
        "n3: Slurm job 913 idle notebook (bob, account vision) holds GPU 1 and has not used it for 1m")
    clock.t = t0 + 120
    h.send(_snap(w, on=(), allocations=[]))  # Slurm ended the job
    await h.tick()  # evaluate() saves what changed
    stored = h.store.alerts[alert.fingerprint]
    assert stored.state == "resolved" and stored.annotations["resolved"] == (
        "Slurm job 913 on n3 no longer holds GPU 1 (ended or released) after 2m")


async def test_only_running_jobs_and_gpus_the_snapshot_can_judge(harness, clock, w):
    h = harness(w.config(rules={"allocated_unused": {"for": 0.0}, "idle": {"for": 0.0}}))
    await h.engine.start(run_tick=False)
    h.up()
    # suspended: nothing; an index NVML does not list (gres.conf order): not judged; a lost GPU: not judged
    h.send(_snap(w, on=(), allocations=[_alloc("1", (0,), state="SUSPENDED"), _alloc("2", (1, 7))]))
    await h.tick()
    assert {(a.rule, a.labels.get("gpus") or a.labels.get("gpu")) for a in h.engine.active()} == {
        ("allocated_unused", "1"), ("idle", "0")}  # GPU 0: the suspended job's does not count as held
    lost = _snap(w, on=(), allocations=[_alloc("2", (1,))])
    lost.gpus[1] = lost_gpu(1)
    h2 = harness(w.config(rules={"allocated_unused": {"for": 0.0}}))
    await h2.engine.start(run_tick=False)
    h2.up()
    h2.send(lost)
    await h2.tick()
    assert not [a for a in h2.engine.active() if a.rule == "allocated_unused"]
