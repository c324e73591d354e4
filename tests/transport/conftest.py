"""Fixtures for transport tests: a collecting sink, the agent command, simulated fleets on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.manager import FleetTransport

from tests.transport.sshtestlib import FAST, REAL, STANDIN, CollectingSink, real_agent_works


@pytest.fixture(scope="session")
def agent_argv() -> list[str]:
    return REAL if real_agent_works() else STANDIN


@pytest.fixture
def sink() -> CollectingSink:
    return CollectingSink()


@pytest.fixture
async def fleet(agent_argv: list[str]) -> AsyncIterator[SimFleet]:
    async with SimFleet(3, interval=0.1, agent_argv=agent_argv) as f:
        yield f


@pytest.fixture
async def transport_for() -> AsyncIterator[Callable[..., FleetTransport]]:
    """Builds FleetTransports with fast backoff and stops them all at the end of the test."""
    made: list[FleetTransport] = []

    def make(hosts: list[HostConfig], sink: CollectingSink | LiveView, **kw: object) -> FleetTransport:
        live = sink if isinstance(sink, LiveView) else LiveView([sink])  # the transport reports into a view
        t = FleetTransport(hosts, live, **{**FAST, **kw})  # type: ignore[arg-type]
        made.append(t)
        return t

    yield make
    for t in made:
        await t.stop(timeout=3)
