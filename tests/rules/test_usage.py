"""wasted / idle / stale / orphaned_memory conditions from hand-built snapshots."""

from __future__ import annotations

from gpufleet.collector.rules.wording import DURATION
from gpufleet.collector.settings import Selector


def test_wasted_names_user_process_memory_and_util(runner, w):
    r = runner("wasted")
    conds = r.feed(w.snap(w.gpu(2, util=2, procs=[w.proc(4242, command="/usr/bin/jupyter-lab")])), 0.0)
    assert conds is not None and len(conds) == 1
    c = conds[0]
    assert c.labels == {"host": "n3", "gpu": "2", "uuid": "GPU-0002", "user": "alice"}
    assert c.summary == (
        f"alice's jupyter-lab (pid 4242) holds 40.0 GiB on n3 GPU 2 at 2 % util for {DURATION}")
    assert c.annotations["pid"] == "4242"
    assert c.value == 40 * w.GIB


def test_wasted_needs_low_util_and_enough_memory(runner, w):
    r = runner("wasted")
    assert r.feed(w.snap(w.gpu(0, util=50, procs=[w.proc()])), 0.0) == []
    r2 = runner("wasted")
    assert r2.feed(w.snap(w.gpu(0, util=0, procs=[w.proc(mem_gib=0.1)])), 0.0) == []  # 100 MiB < 256 MiB
    assert r2.feed(w.snap(w.gpu(0, util=0, procs=[])), 1.0) == []


def test_wasted_unknown_util_is_never_flagged_but_process_sm_util_counts(runner, w):
    r = runner("wasted")
    assert r.feed(w.snap(w.gpu(0, util=None, procs=[w.proc()])), 0.0) == []
    r2 = runner("wasted")
    conds = r2.feed(w.snap(w.gpu(0, util=None, procs=[w.proc(sm_util=0)])), 0.0)
    assert conds and conds[0].labels["user"] == "alice"


def test_wasted_tolerates_short_spikes_but_not_sustained_work(runner, w):
    r = runner("wasted")  # spike tolerance 60 s
    idle = w.snap(w.gpu(0, util=1, procs=[w.proc()]))
    busy = w.snap(w.gpu(0, util=90, procs=[w.proc()]))
    assert r.feed(idle, 0.0)
    assert r.feed(busy, 10.0), "a 10 s spike keeps the condition"
    assert r.feed(busy, 50.0), "still within the 60 s tolerance"
    assert r.feed(idle, 60.0)
    assert r.feed(busy, 100.0)
    assert r.feed(busy, 161.0) == [], "busy for 61 s: the GPU is being used"
    assert r.feed(busy, 170.0) == []
    assert r.feed(idle, 180.0), "a new idle streak starts"


def test_wasted_busy_from_the_start_is_not_a_tolerated_spike(runner, w):
    r = runner("wasted")
    assert r.feed(w.snap(w.gpu(0, util=90, procs=[w.proc()])), 0.0) == []


def test_wasted_power_signal(runner, w):
    # A stuck collective: util 0 here but power high means work; power_idle_ratio 0.3 requires < 30 % power
    r = runner("wasted", power_idle_ratio=0.3)
    hot = w.snap(w.gpu(0, util=0, procs=[w.proc()], power_draw=250.0, power_limit=400.0))
    assert r.feed(hot, 0.0) == []
    cool = w.snap(w.gpu(0, util=0, procs=[w.proc()], power_draw=60.0, power_limit=400.0))
    assert r.feed(cool, 1.0)


def test_wasted_groups_processes_per_user(runner, w):
    r = runner("wasted")
    g = w.gpu(1, util=0, procs=[w.proc(1, command="python a.py", mem_gib=10),
                                w.proc(2, command="python b.py", mem_gib=5),
                                w.proc(3, user="bob", mem_gib=2)])
    conds = r.feed(w.snap(g), 0.0)
    assert conds is not None
    by_user = {c.labels["user"]: c for c in conds}
    assert set(by_user) == {"alice", "bob"}
    summary = by_user["alice"].summary
    assert "alice's 2 processes (python a.py pid 1, python b.py pid 2) hold 15.0 GiB" in summary
    assert by_user["alice"].annotations["pid"] == "1,2"


def test_wasted_ignores_zombies(runner, w):
    r = runner("wasted")
    assert r.feed(w.snap(w.gpu(0, util=0, procs=[w.proc(state="Z")])), 0.0) == []


def test_selector_is_applied_by_engine_but_params_are_per_rule(runner, w):
    # selectors are matched by the engine (see tests/alerts); here: custom thresholds
    r = runner("wasted", util_below=50, min_memory_mib=1024)
    assert r.feed(w.snap(w.gpu(0, util=30, procs=[w.proc(mem_gib=2)])), 0.0)
    r2 = runner("wasted", select=Selector(users=["bob"]), min_memory_mib=4096)
    assert r2.feed(w.snap(w.gpu(0, util=30, procs=[w.proc(mem_gib=2)])), 0.0) == []


def test_idle_gpu(runner, w):
    r = runner("idle")
    conds = r.feed(w.snap(w.gpu(1, util=0, mem_used_gib=0.05), w.gpu(2, util=0, procs=[w.proc()])), 0.0)
    assert conds is not None and [c.labels["gpu"] for c in conds] == ["1"]
    assert conds[0].summary.startswith("n3 GPU 1 (A100) idle for")
    assert r.feed(w.snap(w.gpu(1, util=3, mem_used_gib=0.05)), 1.0) == []
    assert r.feed(w.snap(w.gpu(1, util=0, mem_used_gib=1.0)), 2.0) == [], "memory in use is not idle"


def test_stale_zombie_fires_with_pid_label(runner, w):
    r = runner("stale")
    conds = r.feed(w.snap(w.gpu(0, util=0, procs=[w.proc(77, state="Z", command="python train.py")])), 0.0)
    assert conds is not None and len(conds) == 1
    assert conds[0].labels["pid"] == "77"
    assert conds[0].annotations["reason"] == "zombie"
    assert "is a zombie holding 40.0 GiB" in conds[0].summary


def test_stale_orphan_needs_no_gpu_use_for_no_session_idle(runner, w):
    r = runner("stale", no_session_idle=600.0)
    orphan_idle = w.snap(w.gpu(0, util=0, procs=[w.proc(5, ppid=1, sm_util=0, start_time=100.0)]))
    orphan_busy = w.snap(w.gpu(0, util=40, procs=[w.proc(5, ppid=1, sm_util=40, start_time=100.0)]))
    assert r.feed(orphan_idle, 0.0) == []
    assert r.feed(orphan_idle, 599.0) == []
    conds = r.feed(orphan_idle, 600.0)
    assert conds and conds[0].annotations["reason"] == "orphaned"
    assert "lost its session (parent is init) and has not used the GPU for 10m" in conds[0].summary
    assert r.feed(orphan_busy, 601.0) == [], "using the GPU again resets it"
    assert r.feed(orphan_idle, 1000.0) == []
    # a process with a live parent is never "orphaned"
    r2 = runner("stale", no_session_idle=1.0)
    live = w.snap(w.gpu(0, util=0, procs=[w.proc(6, ppid=4000, sm_util=0)]))
    assert r2.feed(live, 0.0) == [] and r2.feed(live, 100.0) == []


def test_orphaned_memory(runner, w):
    r = runner("orphaned_memory")
    conds = r.feed(w.snap(w.gpu(3, util=0, mem_used_gib=2.0)), 0.0)
    assert conds is not None and len(conds) == 1
    assert conds[0].summary.startswith("n3 GPU 3 has 2.0 GiB in use with no process visible")
    assert r.feed(w.snap(w.gpu(3, util=0, mem_used_gib=0.1)), 1.0) == []
    assert r.feed(w.snap(w.gpu(3, util=0, procs=[w.proc()])), 2.0) == []
    assert r.feed(w.snap(w.gpu(3, util=0, mem_used_gib=8.0, mig_mode=True)), 3.0) == []


def test_rules_without_snapshot_know_nothing(runner):
    names = ("wasted", "idle", "stale", "orphaned_memory", "overheating", "throttling", "ecc", "gpu_lost")
    for name in names:
        r = runner(name)
        assert r.rule.conditions(r.ctx, 0.0) is None, name


def test_wasted_stuck_collective_busy_util_near_idle_power(runner, w):
    """A hung NCCL job: 100 % util (a kernel is resident) but near-idle power; flagged when configured."""
    def hung(ts: float):
        return w.snap(w.gpu(0, util=100, procs=[w.proc(7, command="python train.py --nproc 8",
                                                        sm_util=0)],
                            power_draw=62.0, power_limit=400.0), ts=ts)

    default = runner("wasted")
    assert default.feed(hung(0.0), 0.0) == [], "off by default: idle power differs per board"
    r = runner("wasted", stuck_power_ratio=0.2)
    conds = r.feed(hung(0.0), 0.0)
    assert conds is not None and len(conds) == 1
    c = conds[0]
    assert c.labels == {"host": "n3", "gpu": "0", "uuid": "GPU-0000", "user": "alice"}
    assert c.annotations["reason"] == "stuck"
    assert c.summary == (f"alice's python train.py (pid 7) holds 40.0 GiB on n3 GPU 0 at 100 % util but only "
                         f"62 of 400 W for {DURATION}: looks stuck (a hung collective?)")
    assert "hung NCCL collective" in c.description
    assert "gpufleet silence add --host n3 --gpu 0 --user alice --rule wasted --for 2h" in c.description
    assert r.feed(hung(30.0), 30.0), "stays true through the streak"
    # real work draws power: busy longer than the spike tolerance clears it
    working = w.snap(w.gpu(0, util=100, procs=[w.proc(7)], power_draw=330.0, power_limit=400.0))
    assert r.feed(working, 40.0), "a short burst is tolerated"
    assert r.feed(working, 101.0) == []
    # power unknown: util alone decides, so a 100 % GPU is never called stuck
    blind = w.snap(w.gpu(0, util=100, procs=[w.proc(7)]))
    assert runner("wasted", stuck_power_ratio=0.2).feed(blind, 0.0) == []


def test_wasted_stuck_fires_after_for_through_the_engine_clock(runner, w):
    """Idle and stuck samples share one streak, so switching between them does not restart the duration."""
    r = runner("wasted", stuck_power_ratio=0.2)
    idle = w.snap(w.gpu(0, util=0, procs=[w.proc()], power_draw=55.0, power_limit=400.0))
    stuck = w.snap(w.gpu(0, util=100, procs=[w.proc()], power_draw=70.0, power_limit=400.0))
    assert r.feed(idle, 0.0)
    conds = r.feed(stuck, 10.0)
    assert conds and conds[0].annotations["reason"] == "stuck"
    assert r.rule._streaks["n3"]["GPU-0000"].low_since == 0.0  # type: ignore[attr-defined]
    conds = r.feed(idle, 20.0)
    assert conds and conds[0].annotations["reason"] == "idle"


def test_wasted_keep_command_is_scoped_to_the_user(runner, w):
    r = runner("wasted")
    g = w.gpu(1, util=0, procs=[w.proc(1, user="alice"), w.proc(2, user="bob")])
    by_user = {c.labels["user"]: c for c in r.feed(w.snap(g), 0.0) or []}
    assert by_user["alice"].description.endswith(
        "keep it with `gpufleet silence add --host n3 --gpu 1 --user alice --rule wasted --for 2h "
        "--comment keep`.")
    assert "--user bob" in by_user["bob"].description


def test_slurm_names_go_to_annotations_and_the_summary_never_to_labels(runner, w):
    """The agent names a job seconds after first reporting it: the alert keeps its fingerprint."""
    from gpufleet.collector.alerts.fingerprint import fingerprint

    r = runner("wasted")
    bare = w.proc(4242, command="python train.py", job="90210")
    named = w.proc(4242, command="python train.py", job="90210", job_name="train-llm", job_user="alice",
                   job_account="nlp", job_partition="h100", job_state="RUNNING")
    [before] = r.feed(w.snap(w.gpu(0, util=0, procs=[bare])), 0.0)
    [after] = r.feed(w.snap(w.gpu(0, util=0, procs=[named])), 1.0)
    assert before.labels == after.labels and fingerprint(before.labels) == fingerprint(after.labels)
    assert not any(k.startswith("slurm") for k in before.annotations)
    assert {k: v for k, v in after.annotations.items() if k.startswith("slurm")} == {
        "slurm_job_name": "train-llm", "slurm_user": "alice", "slurm_account": "nlp",
        "slurm_partition": "h100", "slurm_state": "RUNNING"}
    assert after.summary.startswith("alice's python train.py (pid 4242) in Slurm job 90210 train-llm holds")
