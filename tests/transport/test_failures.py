"""Each failure ends only the affected host's stream, with a reason, and the host comes back."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time

from gpufleet.agent import wire
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.manager import FleetTransport

from tests.transport.sshtestlib import CollectingSink, MakeTransport


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def _all_up(t: FleetTransport, sink: CollectingSink) -> None:
    await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()), what="all hosts up")


async def test_agent_killed_goes_down_then_comes_back(fleet: SimFleet, sink: CollectingSink,
                                                      transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(), sink)
    await t.start()
    await _all_up(t, sink)
    assert fleet.kill_agent("sim-001") == 1
    await sink.wait_for(lambda: t.states()["sim-001"].connects == 2, what="reconnect after kill")
    assert sink.reasons("sim-001")[0] == "agent killed by signal KILL"
    assert sink.statuses("sim-001") == ["connecting", "up", "down", "up"]
    st = t.states()["sim-001"]
    assert st.status == "up" and st.reconnects == 1
    assert sink.statuses("sim-002") == ["connecting", "up"]


async def test_hung_agent_is_down_within_the_read_timeout(fleet: SimFleet, sink: CollectingSink,
                                                          transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(read_timeout=0.6), sink)
    await t.start()
    await _all_up(t, sink)
    [pid] = fleet.agent_pids("sim-002")
    fleet.pause_agent("sim-002")  # SIGSTOP: the connection stays open, nothing more arrives
    await sink.wait_for(lambda: bool(sink.reasons("sim-002")), what="sim-002 down")
    assert sink.reasons("sim-002")[0] == "no frame for 0.6 s"
    await sink.wait_for(lambda: t.states()["sim-002"].connects == 2, what="sim-002 back with a new agent")
    # the collector asked for SIGKILL on the way out, so the stopped agent does not linger
    await sink.wait_for(lambda: not _alive(pid), what="stopped agent reaped")
    assert not sink.reasons("sim-001") and not sink.reasons("sim-003")


async def test_network_cut_then_server_back_on_the_same_port(fleet: SimFleet, sink: CollectingSink,
                                                             transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(), sink)
    await t.start()
    await _all_up(t, sink)
    port = fleet.hosts["sim-003"].port
    await fleet.cut("sim-003")
    await sink.wait_for(lambda: t.states()["sim-003"].status == "down", what="sim-003 down")
    await sink.wait_for(lambda: any("cannot connect" in r for r in sink.reasons("sim-003")),
                        what="a refused reconnect")
    first = sink.reasons("sim-003")[0]
    assert first.startswith(("connection lost", "agent killed", "connection closed")), first
    assert sink.reasons("sim-003")[-1].endswith(": Connection refused"), sink.reasons("sim-003")
    await fleet.restore("sim-003")
    assert fleet.hosts["sim-003"].port == port
    await sink.wait_for(lambda: t.states()["sim-003"].status == "up", what="sim-003 up again")
    assert t.states()["sim-003"].connects == 2
    assert sink.statuses("sim-001") == ["connecting", "up"]


async def _one_bad_host(fleet: SimFleet, sink: CollectingSink, t: FleetTransport, data: bytes) -> str:
    await t.start()
    await _all_up(t, sink)
    before = {n: sink.count(n) for n in ("sim-002", "sim-003")}
    assert fleet.inject("sim-001", data) == 1
    await sink.wait_for(lambda: bool(sink.reasons("sim-001")), what="sim-001 closed")
    reason = sink.reasons("sim-001")[0]
    assert t.states()["sim-001"].bad_frames == 1
    await sink.wait_for(lambda: t.states()["sim-001"].connects == 2, what="sim-001 reconnected")
    # the others never noticed: still up, still streaming, never down
    await sink.wait_for(lambda: all(sink.count(n) >= before[n] + 5 for n in before), what="others streaming")
    for n in before:
        assert sink.statuses(n) == ["connecting", "up"]
        assert t.states()[n].bad_frames == 0
    return reason


async def test_garbage_line_closes_only_that_host(fleet: SimFleet, sink: CollectingSink,
                                                  transport_for: MakeTransport) -> None:
    reason = await _one_bad_host(fleet, sink, transport_for(fleet.host_configs(), sink),
                                 b"\nthis is not json at all\n")
    assert reason.startswith("protocol error: not valid JSON"), reason


async def test_oversized_line_closes_only_that_host(fleet: SimFleet, sink: CollectingSink,
                                                    transport_for: MakeTransport) -> None:
    reason = await _one_bad_host(fleet, sink, transport_for(fleet.host_configs(), sink),
                                 b"\n" + b"x" * 2_000_000 + b"\n")
    assert reason.startswith("protocol error: line of ")
    assert reason.endswith("exceeds the 1048576-byte bound"), reason


async def test_smaller_configured_bound(fleet: SimFleet, sink: CollectingSink,
                                        transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(max_line_bytes=64 << 10), sink)
    big = b'\n{"type":"heartbeat","proto":"1.0","pad":"' + b"y" * 70_000 + b'"}\n'
    reason = await _one_bad_host(fleet, sink, t, big)
    assert reason.endswith("exceeds the 65536-byte bound"), reason


async def test_wrong_protocol_major_version(fleet: SimFleet, sink: CollectingSink,
                                            transport_for: MakeTransport) -> None:
    frame = wire.encode(wire.Heartbeat(ts=1.0, proto="2.0"))
    reason = await _one_bad_host(fleet, sink, transport_for(fleet.host_configs(), sink), b"\n" + frame)
    assert reason.startswith("protocol error: agent speaks protocol 2.0"), reason


async def test_newer_minor_version_is_accepted(fleet: SimFleet, sink: CollectingSink,
                                               transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(), sink)
    await t.start()
    await _all_up(t, sink)
    n = sink.count("sim-001", "heartbeat")
    # stamped now: a frame from 1970 would (rightly) flag the host's clock, a host_state of its own
    fleet.inject("sim-001", b"\n" + wire.encode(wire.Heartbeat(ts=time.time(), proto="1.9")).replace(
        b"}", b',"future_field":[1,2]}'))
    await sink.wait_for(lambda: sink.count("sim-001", "heartbeat") == n + 1, what="heartbeat accepted")
    assert t.states()["sim-001"].bad_frames == 0 and sink.statuses("sim-001") == ["connecting", "up"]


async def test_unreachable_host_stays_down_and_retries(sink: CollectingSink,
                                                       transport_for: MakeTransport,
                                                       fleet: SimFleet) -> None:
    await fleet.cut("sim-001")
    t = transport_for(fleet.host_configs(connect_timeout=2.0), sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["sim-001"].reconnects >= 3, what="three retries")
    st = t.states()["sim-001"]
    assert st.status == "down" and st.connects == 0
    assert st.reason is not None and st.reason.startswith("cannot connect to 127.0.0.1:")
    # retries do not flap the status: connecting once, then down (reason updates only if it changes)
    assert sink.statuses("sim-001") == ["connecting", "down"]


async def test_unknown_agent_command(fleet: SimFleet, sink: CollectingSink,
                                     transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(agent_command="no-such-agent"), sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("sim-001")))
    assert sink.reasons("sim-001")[0] == "agent exited with status 127: sh: 1: no-such-agent: not found"


async def test_silent_peer_is_noticed_by_keepalive(sink: CollectingSink,
                                                   transport_for: MakeTransport) -> None:
    # a frozen server process: TCP stays open, nothing answers (a partition, not a refusal)
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpufleet.collector.simfleet", "--hosts", "1", "--mode", "inproc",
        "--interval", "0.1", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert server.stdout is not None and server.stdin is not None
    try:
        desc = json.loads(await asyncio.wait_for(server.stdout.readline(), 30))
        cfg = dataclasses.replace(HostConfig.from_dict(desc["hosts"][0]), read_timeout=60.0,
                                  keepalive_interval=0.2, keepalive_count_max=2)
        t = transport_for([cfg], sink)
        await t.start()
        await sink.wait_for(lambda: t.states()[cfg.name].status == "up")
        server.send_signal(signal.SIGSTOP)
        await sink.wait_for(lambda: bool(sink.reasons(cfg.name)), what="keepalive failure")
        assert "keepalive" in sink.reasons(cfg.name)[0].lower(), sink.reasons(cfg.name)
    finally:
        server.send_signal(signal.SIGCONT)
        server.stdin.close()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except (asyncio.TimeoutError, TimeoutError):
            server.kill()
            await server.wait()
