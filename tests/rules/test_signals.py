"""Multi-signal verdicts (collector/model/classify.py activity): util is one signal, and where NVML reports
them, memory bandwidth, GPM SM activity and power confirm or deny it."""

from __future__ import annotations

import pytest
from gpufleet.collector.model.classify import activity
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.rules.wording import DURATION

POWER_ON = Thresholds(stuck_power_ratio=0.2)


@pytest.mark.parametrize("util, mem, sm, watts, t, verdict", [
    # util alone where nothing else is reported: today's verdicts
    (100, None, None, None, Thresholds(), "busy"),
    (2, None, None, None, Thresholds(), "idle"),
    # low util but the memory controller is busy: a memory/copy-bound phase is work, not waste
    (2, 60, None, None, Thresholds(), "busy"),
    (2, 9, None, None, Thresholds(), "idle"),
    (2, 60, None, None, Thresholds(mem_busy_at_least=0), "idle"),  # 0 turns the signal off
    # high util, idle power: stuck, unless the memory traffic or the SMs show work
    (100, None, None, 60.0, POWER_ON, "stuck"),
    (100, 0, None, 60.0, POWER_ON, "stuck"),
    (100, 50, None, 60.0, POWER_ON, "busy"),
    (100, 0, 80, 60.0, POWER_ON, "busy"),
    # low memory traffic alone never calls a busy GPU stuck (a compute-bound kernel moves little memory)
    (100, 0, None, 350.0, POWER_ON, "busy"),
    (100, 0, None, None, Thresholds(), "busy"),
    # GPM SM activity (Hopper+): a resident kernel on almost no SMs is stuck, even without power configured
    (100, 0, 1, None, Thresholds(), "stuck"),
    (100, 0, 1, None, Thresholds(sm_active_at_least=0), "busy"),
    (100, 1, 90, None, Thresholds(), "busy"),
    (2, 0, 40, None, Thresholds(), "busy"),
])
def test_activity_combines_the_signals(w, util, mem, sm, watts, t, verdict):
    g = w.gpu(0, util=util, procs=[w.proc()], util_mem=mem, sm_active=sm, power_draw=watts,
              power_limit=400.0 if watts is not None else None)
    assert activity(g, t) == verdict


def test_wasted_stuck_from_sm_activity_says_which_signals_saw_no_work(runner, w):
    r = runner("wasted")  # default parameters: power is off, SM activity under 3 % speaks
    spin = w.snap(w.gpu(0, util=100, procs=[w.proc(7, command="python train.py")], util_mem=0, sm_active=1,
                        power_draw=70.0, power_limit=700.0))
    conds = r.feed(spin, 0.0)
    assert conds and conds[0].annotations["reason"] == "stuck"
    assert conds[0].summary == (
        f"alice's python train.py (pid 7) holds 40.0 GiB on n3 GPU 0 at 100 % util but only 70 of 700 W, "
        f"1 % SM activity, 0 % memory bandwidth for {DURATION}: looks stuck (a hung collective?)")
    assert ("but only 1 % of its SMs are active (under 3 %), it uses 0 % of its memory bandwidth: it is "
            "spinning" in conds[0].description)


def test_wasted_spares_a_memory_bound_job_at_low_util(runner, w):
    r = runner("wasted")
    streaming = w.snap(w.gpu(0, util=2, procs=[w.proc()], util_mem=65))
    assert r.feed(streaming, 0.0) == []
    assert r.feed(w.snap(w.gpu(0, util=2, procs=[w.proc()], util_mem=0)), 1.0), "the traffic stops: idle"
