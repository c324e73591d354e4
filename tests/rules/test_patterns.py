"""underused / input_bound / near_oom / idle_peers conditions from hand-built 1 Hz snapshots."""

from __future__ import annotations

import pytest
from gpufleet.collector.model.jobkey import group_key, job_key
from gpufleet.collector.rules.base import HostContext
from gpufleet.collector.rules.patterns import _GpuTrack
from gpufleet.collector.rules.series import Window, WindowMean


def feed(r, snaps, start=0.0):
    conds = None
    for i, s in enumerate(snaps):
        conds = r.feed(s, start + i)
    return conds


def swings(utils: list[int]) -> int:
    track = _GpuTrack(Window(1000.0, typecode="d"))
    for t, u in enumerate(utils):
        track.add(float(t), u, None, 70, 20)
    return len(track.swings)


def test_swings_need_both_bands():
    assert swings([90, 10, 90, 10]) == 3
    assert swings([90, 50, 90, 50]) == 0, "never under the low band"
    assert swings([90, 50, 10, 50, 90]) == 2, "values between the bands keep the side"


def test_underused_fires_on_a_full_window_of_low_mean_util(runner, w):
    r = runner("underused", window=600.0)
    p = w.proc(7, command="python train.py", start_time=1000.0, ppid=50)
    snaps = [w.snap(w.gpu(0, util=20 if i % 2 else 25, procs=[p])) for i in range(500)]
    assert feed(r, snaps) == [], "not yet a whole window"
    conds = feed(r, [w.snap(w.gpu(0, util=22, procs=[p]))] * 100, start=500.0)
    assert conds and len(conds) == 1
    c = conds[0]
    assert c.labels == {"host": "n3", "gpu": "0", "uuid": "GPU-0000", "user": "alice", "pid": "7"}
    assert c.annotations["process_start"] == "1000"
    assert "averages 22 % GPU util over 10m" in c.summary
    assert "num_workers" in c.description


def test_underused_leaves_idle_to_wasted_and_busy_alone(runner, w):
    for util in (1, 60):
        r = runner("underused", window=100.0)
        p = w.proc(7, start_time=1.0)
        assert feed(r, [w.snap(w.gpu(0, util=util, procs=[p]))] * 150) == [], util


def test_underused_restarts_with_a_new_process(runner, w):
    r = runner("underused", window=100.0)
    a = w.proc(7, start_time=1.0)
    b = w.proc(7, start_time=2.0)  # same pid, another process
    feed(r, [w.snap(w.gpu(0, util=20, procs=[a]))] * 95)
    assert feed(r, [w.snap(w.gpu(0, util=20, procs=[b]))] * 50, start=95.0) == []


def test_underused_takes_the_mean_of_every_gpu_a_process_holds(runner, w):
    """One process on two GPUs (10 % and 40 %): its util is their mean, 25 %, the alert its first GPU."""
    r = runner("underused", window=100.0)
    p = w.proc(7, start_time=1.0)
    snaps = [w.snap(w.gpu(0, util=10, procs=[p]), w.gpu(1, util=40, procs=[p]))] * 150
    [c] = feed(r, snaps)
    assert c.labels["gpu"] == "0" and c.value == 25.0 and "averages 25 %" in c.summary


def test_underused_means_are_each_process_own_however_they_share(runner, w):
    """Processes first seen together on one GPU share one running mean; any whose values part from the
    others' (it takes a second GPU, moves to another, leaves and comes back) goes on with its own. Every
    verdict equals that of a mean kept per process from its own values, sample by sample."""
    r = runner("underused", window=60.0)
    procs = {pid: w.proc(pid, user=f"u{pid}", start_time=float(pid)) for pid in range(1, 9)}

    def gpus_of(pid: int, i: int) -> list[int]:
        if pid <= 3:
            return [0]  # together from the start
        if pid == 4:
            return [0] if i < 90 else [1]  # moves
        if pid == 5:
            return [1, 2] if 40 <= i < 70 else [1]  # holds a second one for a while
        if pid == 6:
            return [] if 80 <= i < 85 else [1]  # with 5 from the start; leaves and comes back
        return [0] if i >= 30 else []  # 7 and 8 arrive later, together

    reference: dict[int, WindowMean] = {}
    for i in range(200):
        util = {k: 10 + (i * (k + 3) + 7 * k) % 18 for k in range(3)}  # 10..27: never idle, always low
        on = {pid: gpus_of(pid, i) for pid in procs}
        snap = w.snap(*[w.gpu(k, util=util[k], procs=[procs[p] for p in procs if k in on[p]])
                        for k in range(3)])
        conds = r.feed(snap, float(i))
        reference = {pid: reference.get(pid) or WindowMean(60.0) for pid in procs if on[pid]}
        for pid, mean in reference.items():
            mean.add(float(i), sum(util[k] for k in on[pid]) / len(on[pid]))
        expected = {pid: mean.mean() for pid, mean in reference.items() if mean.full()}
        assert {int(c.labels["pid"]): c.value for c in conds or []} == expected, i
    assert len(expected) == 8


def sawtooth(i, low=8, high=92, period=10):
    return high if i % period < period // 2 else low


def test_input_bound_on_sawtooth_with_flat_memory(runner, w):
    r = runner("input_bound")
    p = w.proc(9, command="python train.py")
    snaps = [w.snap(w.gpu(1, util=sawtooth(i), procs=[p])) for i in range(130)]
    conds = feed(r, snaps)
    assert conds and conds[0].labels["gpu"] == "1" and conds[0].labels["user"] == "alice"
    assert "input-bound" in conds[0].summary and "num_workers" in conds[0].description
    assert "pin_memory" in conds[0].description


def test_input_bound_not_on_slow_bursts_or_moving_memory(runner, w):
    r = runner("input_bound")
    p = w.proc(9)
    slow = [w.snap(w.gpu(0, util=sawtooth(i, period=60), procs=[p])) for i in range(130)]
    assert feed(r, slow) == [], "two swings a minute: evaluation bursts"
    r2 = runner("input_bound")
    moving = [w.snap(w.gpu(0, util=sawtooth(i), procs=[w.proc(9, mem_gib=20 + 20 * (i % 10 < 5))]))
              for i in range(130)]
    assert feed(r2, moving) == [], "memory moves with util: other work, not starvation"


def test_near_oom(runner, w):
    r = runner("near_oom")
    p = w.proc(3, mem_gib=77.0)
    conds = r.feed(w.snap(w.gpu(0, util=95, procs=[p], mem_used_gib=77.5)), 0.0)
    assert conds and "near out of memory" in conds[0].summary and "batch size" in conds[0].description
    assert "gradient" in conds[0].description
    assert r.feed(w.snap(w.gpu(0, util=95, procs=[p], mem_used_gib=70.0)), 1.0) == []


def test_idle_peers_one_host(runner, w):
    r = runner("idle_peers")
    procs = [w.proc(100 + i, user="carol", mem_gib=2, job="777", command="python ddp.py") for i in range(4)]
    snap = w.snap(*[w.gpu(i, util=95 if i == 0 else 0, procs=[procs[i]]) for i in range(4)])
    conds = feed(r, [snap] * 60)
    assert conds is not None and sorted(c.labels["gpu"] for c in conds) == ["1", "2", "3"]
    c = conds[0]
    assert c.labels["job"] == "slurm:777" and c.labels["user"] == "carol"
    assert "holds 4 GPUs but only 1 computes" in c.summary and "CUDA_VISIBLE_DEVICES" in c.description


def test_idle_peers_not_when_all_compute_or_all_idle_or_unrelated(runner, w):
    for utils in ((95, 95), (0, 0)):
        r = runner("idle_peers")
        snap = w.snap(*[w.gpu(i, util=u, procs=[w.proc(10 + i, job="1")]) for i, u in enumerate(utils)])
        assert feed(r, [snap] * 60) == [], utils
    r = runner("idle_peers")  # two separate jobs of one user
    snap = w.snap(w.gpu(0, util=95, procs=[w.proc(10, ppid=1)]), w.gpu(1, util=0, procs=[w.proc(11, ppid=1)]))
    assert feed(r, [snap] * 60) == []


@pytest.mark.parametrize(("interval", "window", "jitter"), [
    (0.2, 2.0, (0.0, 0.003, -0.002, 0.001, -0.004, 0.002, 0.0)),  # stamps a few ms off the agent's grid
    (13.0, 60.0, (0.0,)),  # an interval that does not divide the window
])
def test_idle_peers_holds_once_its_window_has_filled(runner, w, interval, window, jitter):
    """A window of a few sampling intervals holds floor(window / interval) samples or one more as the grid
    slides past its edge, so their spread swings by one interval. Judged full on that spread against 90 % of
    the window, a held-idle GPU's condition came and went every few samples (0.2 s samples, a 2 s window:
    the spread is 1.8 s give or take the stamps' jitter) or never came (13 s samples, a 60 s window: 52 s),
    and its idle_peers alert stayed pending for good."""
    r = runner("idle_peers", window=window)
    procs = [w.proc(100 + i, user="frank", mem_gib=2, ppid=7100, command="python train_ddp.py")
             for i in range(4)]
    snap = w.snap(*[w.gpu(i, util=95 if i == 0 else 0, procs=[procs[i]]) for i in range(4)])
    seen = []
    for i in range(int(4 * window / interval)):
        now = i * interval + jitter[i % len(jitter)]
        conds = r.feed(snap, now)
        if now >= window + interval:  # a whole window and a sample more
            seen.append((round(now, 3), sorted(c.labels["gpu"] for c in conds or ())))
    assert seen and [s for s in seen if s[1] != ["1", "2", "3"]] == []


def test_idle_peers_across_hosts(runner, w):
    r = runner("idle_peers")
    a, b = r.ctx, HostContext(name="n4")
    busy = w.snap(w.gpu(0, util=97, procs=[w.proc(1, job="55")]),
                  w.gpu(1, util=96, procs=[w.proc(2, job="55")]))
    idle = w.snap(w.gpu(0, util=0, procs=[w.proc(1, job="55")]))
    out = None
    for t in range(60):
        r.feed(busy, float(t))
        b.snapshot = idle
        r.rule.observe_snapshot(b, idle, float(t))
        out = r.rule.conditions(b, float(t))
    assert out and out[0].labels["host"] == "n4" and "n3 GPU 0" in out[0].summary
    assert r.rule.conditions(a, 59.0) == [], "the busy host's GPUs are not idle peers"
    # the busy host goes away: its part expires and the job is no longer half-busy
    assert r.rule.conditions(b, 59.0 + 20) == []


def test_job_and_group_keys(w):
    p = w.proc(5, start_time=12.0, ppid=40, command="python ddp.py --rank 1")
    q = w.proc(6, start_time=12.0, ppid=40, command="python ddp.py --rank 2")
    assert job_key("h", p) == "pid:5.12@h"
    assert group_key("h", p) == group_key("h", q)
    nb1 = w.proc(7, ppid=40, command="python -m ipykernel_launcher -f kernel-ab.json")
    nb2 = w.proc(8, ppid=40, command="python -m ipykernel_launcher -f kernel-cd.json")
    assert group_key("h", nb1) != group_key("h", nb2)
    assert job_key("h", w.proc(1, job="9")) == group_key("x", w.proc(2, job="9")) == "slurm:9"


def test_near_oom_crash_loop(runner, w):
    """Runs that grow to the limit and die, restarted by the job: a condition between the runs too."""
    r = runner("near_oom", restart_window=600.0)
    t = 0.0
    conds = None
    for run in range(3):
        p = w.proc(100 + run, start_time=float(run), mem_gib=40.0)
        r.feed(w.snap(w.gpu(0, util=90, procs=[p], mem_used_gib=40.0)), t)
        conds = r.feed(w.snap(w.gpu(0, util=90, procs=[p], mem_used_gib=79.0)), t + 1)  # at the limit
        assert conds and conds[0].annotations["reason"] == "full"
        conds = r.feed(w.snap(w.gpu(0, util=0, procs=[], mem_used_gib=0.3)), t + 2)  # died
        t += 10
        if run == 0:
            assert conds == [], "one death is not a loop"
    assert conds and conds[0].labels["user"] == "alice" and conds[0].annotations["reason"] == "restarts"
    assert "3 processes grew to the memory limit and died in 10m" in conds[0].summary
    assert r.feed(w.snap(w.gpu(0, util=0, procs=[], mem_used_gib=0.3)), t + 700) == [], "the loop aged out"
