"""A host's budget and clock-skew bound come from the config (issue 12: they were defaults only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpufleet.collector.config import load_config
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import HostBudget


def test_budget_and_skew_per_host_and_in_defaults(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("defaults:\n  max_clock_skew: 30s\n  budget: {events_per_second: 5, max_gpus: 16}\n"
                 "hosts:\n  - a\n  - {name: b, budget: {bytes_per_second: 65536}}\n")
    a, b = load_config(f).hosts
    assert a.max_clock_skew == 30.0 and b.max_clock_skew == 30.0
    assert a.budget == HostBudget(events_per_second=5.0, max_gpus=16)
    assert b.budget == HostBudget(bytes_per_second=65536.0)  # a host's own budget replaces the defaults'


def test_budget_mistakes_name_line_and_key(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("hosts:\n  - name: a\n    budget:\n      max_gpus: 0\n      events_per_sec: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(f)
    text = str(err.value)
    assert f"{f}:4: hosts[a].budget.max_gpus" in text
    assert f"{f}:5: hosts[a].budget.events_per_sec" in text and "events_per_second" in text
