"""Fixtures for the agent tests: a controllable clock and the fake backend wired to the real gateway."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from gpufleet.agent.fake import FakeNvml, FakeProcs, Scenario, parse_scenario
from gpufleet.agent.nvml import Gateway
from gpufleet.agent.sampler import Sampler

from tests.builders import FakeClock


@dataclass
class Env:
    clock: FakeClock
    lib: FakeNvml
    gateway: Gateway
    sampler: Sampler


def scenario_from(text: str, source: str = "test.yaml") -> Scenario:
    return parse_scenario(yaml.safe_load(text), source)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)  # the agent tests' timelines start at t=1000


@pytest.fixture
def make_env(clock: FakeClock) -> Iterator[Callable[..., Env]]:
    """Build the fake library + the real Gateway + Sampler from YAML text; the sampler is opened (and its
    reader thread ended after the test)."""
    made: list[Sampler] = []

    def build(text: str, **sampler_kwargs: Any) -> Env:
        lib = FakeNvml(scenario_from(text), clock=clock, wall=lambda: 1_700_000_000.0, sleep=lambda s: None)
        gw = Gateway(lib, backend="fake")
        sampler = Sampler(
            gw, FakeProcs(lib), clock=clock, wall=lambda: 1_700_000_000.0 + clock(), **sampler_kwargs
        )
        sampler.open()
        made.append(sampler)
        return Env(clock, lib, gw, sampler)

    yield build
    for sampler in made:
        sampler.reads.close()


def agent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpufleet.agent", *args]


@pytest.fixture
def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # never pick up a fake libnvidia-ml from another test
    env["PYTHONUNBUFFERED"] = "1"
    return env
