"""Maintenance at the transport (FleetTransport.hold / release), over real SSH on loopback (asyncssh servers
running the real agent as a subprocess): holding a host ends its session so the agent exits on EOF and lets
go of the GPUs, nothing redials it while held (however short the backoff), and releasing dials it at once
(however long the backoff it had built up)."""

from __future__ import annotations

import asyncio

from gpufleet.collector.simfleet import SimFleet

from tests.transport.sshtestlib import CollectingSink, MakeTransport


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


async def test_hold_ends_the_session_the_agent_exits_and_nothing_redials(
        fleet: SimFleet, sink: CollectingSink, transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(), sink)  # backoff 0.05..0.3 s: a redial would come at once
    await t.start()
    await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()), what="all up")
    [session] = fleet.sessions("sim-002")
    agent = session.agent
    assert agent is not None and _running(agent.pid)
    started = fleet.hosts["sim-002"].sessions_started

    t.hold("sim-002", "driver upgrade (by root)")
    state = t.states()["sim-002"]
    assert (state.status, state.reason) == ("maintenance", "driver upgrade (by root)")
    await sink.wait_for(lambda: agent.returncode is not None, what="the agent to exit")
    assert agent.returncode == 0, "the agent exits by itself on EOF, not killed"
    assert not _running(agent.pid)
    assert fleet.sessions("sim-002") == []

    frames = sink.count("sim-002")
    await asyncio.sleep(1.5)  # 5+ backoff periods
    assert fleet.hosts["sim-002"].sessions_started == started, "a held host was dialled"
    assert sink.count("sim-002") == frames
    assert t.states()["sim-002"].status == "maintenance"
    assert "down" not in sink.statuses("sim-002"), "letting go on purpose is not the host going down"
    assert all(t.states()[h].status == "up" for h in ("sim-001", "sim-003")), "the other hosts are untouched"

    t.release("sim-002")
    assert t.states()["sim-002"].status == "connecting"
    await sink.wait_for(lambda: t.states()["sim-002"].status == "up", what="sim-1 back up")
    assert fleet.hosts["sim-002"].sessions_started == started + 1
    assert sink.statuses("sim-002")[-3:] == ["maintenance", "connecting", "up"]


async def test_release_dials_at_once_whatever_backoff_was_built_up(
        fleet: SimFleet, sink: CollectingSink, transport_for: MakeTransport) -> None:
    """A host that failed (next attempt in 60 s) and was then held is dialled the moment it is released."""
    t = transport_for(fleet.host_configs()[:1], sink, backoff_base=60.0, backoff_cap=60.0)
    await t.start()
    await sink.wait_for(lambda: t.states()["sim-001"].status == "up", what="up")
    fleet.drop(["sim-001"])
    await sink.wait_for(lambda: t.states()["sim-001"].status == "down", what="down")
    t.hold("sim-001", "reset (by root)")
    await asyncio.sleep(0.3)
    assert t.states()["sim-001"].status == "maintenance"
    loop = asyncio.get_running_loop()
    released = loop.time()
    t.release("sim-001")
    await sink.wait_for(lambda: t.states()["sim-001"].status == "up", timeout=20, what="up after release")
    assert loop.time() - released < 15, "the release waited out the backoff"


async def test_a_host_held_before_start_is_never_dialled(
        fleet: SimFleet, sink: CollectingSink, transport_for: MakeTransport) -> None:
    """What a restarted collector does for a host still in maintenance."""
    t = transport_for(fleet.host_configs(), sink)
    t.hold("sim-003", "MIG change (by root)")
    await t.start()
    await sink.wait_for(lambda: all(t.states()[h].status == "up" for h in ("sim-001", "sim-002")), what="up")
    await asyncio.sleep(1.0)
    assert fleet.hosts["sim-003"].sessions_started == 0
    assert sink.statuses("sim-003") == ["maintenance"]
    t.release("sim-003")
    await sink.wait_for(lambda: t.states()["sim-003"].status == "up", what="sim-2 up after release")


async def test_stop_while_held_returns_promptly(
        fleet: SimFleet, sink: CollectingSink, transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs()[:1], sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["sim-001"].status == "up", what="up")
    t.hold("sim-001", "x (by root)")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await t.stop(timeout=3)
    assert loop.time() - began < 3, "a held host's wait kept the transport from stopping"
    assert t.states()["sim-001"].status == "maintenance"  # our own stop records nothing about the host
