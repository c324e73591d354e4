"""Precision: on the corpus of real-shaped traces (tests/rules/rules_corpus.py) each rule fires on its own
case and on no other, through the real alert engine with default parameters."""

from __future__ import annotations

import asyncio

import pytest

from tests.rules import rules_corpus as corpus


def test_each_rule_fires_on_its_own_case_and_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    result = corpus.confusion()
    with capsys.disabled():
        print("\n" + corpus.table(result))
    assert {name: sorted(got) for name, got in result.items()} == {
        c.name: sorted(c.expect) for c in corpus.CASES}


def test_every_new_rule_has_a_case_and_every_case_is_judged() -> None:
    wanted = set().union(*(c.expect for c in corpus.CASES))
    assert {"underused", "input_bound", "idle_peers", "near_oom", "wasted"} <= wanted
    names = {c.name for c in corpus.CASES}
    assert {"spinning_kernel", "memory_bound_low_util", "compute_bound_no_traffic"} <= names
    assert any(not c.expect for c in corpus.CASES), "cases where nothing may fire"


def test_wasted_no_longer_fires_on_a_sawtooth_whose_waits_read_zero() -> None:
    """The defect the corpus found: busy runs shorter than spike_tolerance kept wasted's idle streak alive
    on an input-bound job (busy 60 % of the time). busy_share 1.0 is the old behaviour."""
    case = next(c for c in corpus.CASES if c.name == "input_bound_zero_waits")
    assert "wasted" not in asyncio.run(corpus.fired_on(case))
    old = corpus.default_config()
    old.rules["wasted"].params["busy_share"] = 1.0
    assert "wasted" in asyncio.run(corpus.fired_on(case, config=old))


def test_the_second_signals_decide_the_multi_signal_cases() -> None:
    """Util alone (the signals turned off, as before they existed) gets two of the multi-signal cases wrong:
    it calls the memory-bound job wasted, and without power it cannot see the spinning kernel."""
    cases = {c.name: c for c in corpus.CASES}
    util_only = corpus.default_config()
    util_only.rules["wasted"].params.update(mem_busy_at_least=0, sm_active_at_least=0)
    assert "wasted" in asyncio.run(corpus.fired_on(cases["memory_bound_low_util"], config=util_only))
    no_power = corpus.default_config()
    no_power.rules["wasted"].params["stuck_power_ratio"] = 0.0
    assert "wasted" in asyncio.run(corpus.fired_on(cases["spinning_kernel"], config=no_power)), "SM activity"
    no_power.rules["wasted"].params["sm_active_at_least"] = 0
    assert "wasted" not in asyncio.run(corpus.fired_on(cases["spinning_kernel"], config=no_power))
