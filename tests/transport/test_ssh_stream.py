"""Several hosts over real SSH on loopback: frames flow, identities are the dialled names, stop is clean."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from gpufleet.agent import wire
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.model import sample
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.manager import FleetTransport

from tests.transport.sshtestlib import CollectingSink, MakeTransport


async def test_three_hosts_stream_to_the_sink(fleet: SimFleet, sink: CollectingSink,
                                              transport_for: MakeTransport) -> None:
    names = list(fleet.hosts)
    t = transport_for(fleet.host_configs(), sink)
    await t.start()
    await sink.wait_for(lambda: all(sink.count(n, "snapshot") >= 3 for n in names), what="3 snapshots each")
    states = t.states()
    assert set(states) == set(names)
    for n in names:
        st = states[n]
        assert st.status == "up" and st.reason is None
        assert st.connects == 1 and st.reconnects == 0 and st.bad_frames == 0
        assert st.agent_version and st.last_seen is not None and st.lag is not None
        assert isinstance(st.hello, wire.Hello) and isinstance(st.snapshot, sample.Snapshot)
        assert sink.statuses(n)[:2] == ["connecting", "up"]
        # hello comes first on every stream
        assert next(f for h, f, _ in sink.frames if h == n).type == "hello"
    assert {h for h, _, _ in sink.frames} == set(names)


async def test_dialled_name_wins_over_what_hello_claims(agent_argv: list[str], sink: CollectingSink,
                                                        transport_for: MakeTransport) -> None:
    # every simulated host runs on this machine, so every hello claims the same hostname
    async with SimFleet(["gpu-a", "gpu-b"], interval=0.1, agent_argv=agent_argv) as fleet:
        t = transport_for(fleet.host_configs(), sink)
        await t.start()
        await sink.wait_for(lambda: sink.count("gpu-a", "hello") > 0 and sink.count("gpu-b", "hello") > 0)
        claimed = {f.hostname for _, f, _ in sink.frames if isinstance(f, wire.Hello)}
        assert claimed == {t.states()["gpu-a"].reported_hostname}
        assert "gpu-a" not in claimed and "gpu-b" not in claimed
        assert {h for h, _, _ in sink.frames} == {"gpu-a", "gpu-b"}


async def test_inproc_hosts_claiming_another_name(sink: CollectingSink,
                                                  transport_for: MakeTransport) -> None:
    async with SimFleet(["n1", "n2"], mode="inproc", interval=0.1, claimed_hostname="n2",
                        shared_server=True) as fleet:
        t = transport_for(fleet.host_configs(), sink)
        await t.start()
        await sink.wait_for(lambda: sink.count("n1", "snapshot") >= 2 and sink.count("n2", "snapshot") >= 2)
        # n1 says it is n2; it is still n1, and n2's frames are n2's alone
        assert t.states()["n1"].reported_hostname == "n2"
        assert t.states()["n1"].snapshot is not None
        assert t.states()["n1"].snapshot.gpus[0].uuid.startswith("GPU-sim-n1-")  # type: ignore[union-attr]
        assert all(f.gpus[0].uuid.startswith(f"GPU-sim-{h}-") for h, f, _ in sink.frames
                   if isinstance(f, sample.Snapshot))


async def test_stop_sends_eof_and_agents_exit_cleanly(fleet: SimFleet, sink: CollectingSink) -> None:
    t = FleetTransport(fleet.host_configs(), LiveView([sink]), backoff_base=0.05, backoff_cap=0.3)
    await t.start()
    await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()))
    agents = [s.agent for n in fleet.hosts for s in fleet.sessions(n)]
    assert len(agents) == 3 and all(a is not None for a in agents)
    await t.stop(timeout=5)
    for agent in agents:
        assert agent is not None
        assert await asyncio.wait_for(agent.wait(), 5) == 0  # exited on EOF, not killed
    assert all(s.status == "down" and s.reason == "collector stopping" for s in t.states().values())


async def test_live_view_sees_the_same_state(fleet: SimFleet,
                                             transport_for: MakeTransport) -> None:
    view = LiveView()
    t = transport_for(fleet.host_configs(), view)
    await t.start()
    probe = CollectingSink()
    await probe.wait_for(lambda: all(h.snapshot is not None for h in view.hosts.values())
                         and len(view.hosts) == 3)
    assert view.hosts["sim-001"] is t.states()["sim-001"]
    assert view.hosts["sim-001"].status == "up"
    claimed = view.hosts["sim-001"].reported_hostname
    assert claimed and claimed != "sim-001"  # informational only; the key is the dialled name


async def test_restart_host_reconnects_at_once(fleet: SimFleet, sink: CollectingSink,
                                               transport_for: MakeTransport) -> None:
    t = transport_for(fleet.host_configs(), sink, backoff_base=5.0, backoff_cap=10.0)
    await t.start()
    await sink.wait_for(lambda: t.states()["sim-001"].status == "up")
    await t.restart_host("sim-001")
    await sink.wait_for(lambda: t.states()["sim-001"].connects == 2, what="second connection")
    assert sink.reasons("sim-001") == ["restart requested"]
    assert t.states()["sim-001"].status == "up"


async def test_through_a_jump_host(fleet: SimFleet, sink: CollectingSink,
                                   transport_for: MakeTransport) -> None:
    hosts = fleet.host_configs()
    bastion, target = hosts[0], dataclasses.replace(hosts[1], jump=hosts[0].name)
    spec = dataclasses.replace(hosts[2], jump=f"{bastion.user}@127.0.0.1:{bastion.port}")
    t = transport_for([bastion, target, spec], sink)
    await t.start()
    await sink.wait_for(lambda: all(sink.count(h.name, "snapshot") >= 2 for h in (target, spec)),
                        what="snapshots through the jump host")
    # the bastion's server holds three connections: its own session plus one per tunnel
    listener = fleet.hosts["sim-001"].listener
    assert listener is not None and len(listener.conns) == 3
    assert fleet.hosts["sim-002"].sessions_started == 1 and fleet.hosts["sim-003"].sessions_started == 1


async def test_a_cancelled_session_does_not_dial_on_behind_it(sink: CollectingSink) -> None:
    """Cancelling run_ssh while it waits for a connect slot cancels the dial too: no late handshake."""
    from gpufleet.collector.fleet.live import HostState
    from gpufleet.collector.transport.ssh import SshContext, run_ssh
    from gpufleet.collector.transport.stream import AgentStream

    async with SimFleet(["h1"], mode="inproc", interval=0.1) as fleet:
        cfg = fleet.host_configs()[0]
        slots = asyncio.Semaphore(1)
        await slots.acquire()  # every slot taken: the dial reaches the host, then queues
        stream = AgentStream(HostState(name=cfg.name), sink)
        session = asyncio.create_task(run_ssh(cfg, stream, SshContext({cfg.name: cfg}, slots)))
        while fleet.handshakes.accepted == 0:
            await asyncio.sleep(0.01)
        session.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await session
        slots.release()
        await asyncio.sleep(0.5)
        assert fleet.handshakes.peak == 0 and fleet.hosts["h1"].sessions_started == 0
