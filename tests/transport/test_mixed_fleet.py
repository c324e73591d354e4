"""A rolling upgrade's fleet over real SSH: agents before 1.3 (this repository's own 1.1 and 1.2 releases)
beside a 1.3 agent, one collector. The old ones stream full snapshots as they always did and are accepted
unchanged (nothing ignored, nothing refused); the new one is accepted its deltas on stdin and streams them;
a delta that does not apply is dropped and the agent asked for a keyframe, without losing the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.simfleet import FrameGenerator, SimFleet

from tests.oldagent import RELEASES, old_agent_argv
from tests.transport.sshtestlib import REAL, CollectingSink, MakeTransport, real_agent_works


def _snapshots(sink: CollectingSink, host: str) -> list[sample.Snapshot]:
    return [f for h, f, _ in sink.frames if h == host and isinstance(f, sample.Snapshot)]


async def test_old_agents_beside_a_new_one(tmp_path: Path, sink: CollectingSink,
                                           transport_for: MakeTransport) -> None:
    if not real_agent_works():
        pytest.skip("the real agent does not stream here")
    argvs = {commit: old_agent_argv(commit, tmp_path) for commit in RELEASES}
    if any(argv is None for argv in argvs.values()):
        pytest.skip("this checkout has no git history to take the old agents from")
    fleets = {"new": SimFleet(["new-1"], interval=0.2, agent_argv=REAL, scenario="busy")}
    for commit, argv in argvs.items():
        fleets[commit] = SimFleet([f"old-{RELEASES[commit]}"], interval=0.2, agent_argv=argv, scenario="busy")
    for fleet in fleets.values():
        await fleet.start()
    try:
        hosts = [h for fleet in fleets.values() for h in fleet.host_configs()]
        t = transport_for(hosts, sink)
        await t.start()
        names = [h.name for h in hosts]
        await sink.wait_for(lambda: all(len(_snapshots(sink, n)) >= 12 for n in names), timeout=60,
                            what="a dozen snapshots from every agent")
        states = t.states()
        for name in names:
            s = states[name]
            assert s.status == "up" and s.bad_frames == 0 and s.ignored_fields == 0 and s.nulled_values == 0
            assert s.delta_mismatches == 0 and s.reconnects == 0, name
        for proto in RELEASES.values():
            name = f"old-{proto}"
            assert states[name].hello is not None and states[name].hello.proto == proto
            assert states[name].hello.delta is None, "an old agent offers no deltas"
            snaps = _snapshots(sink, name)
            assert {s.proto for s in snaps} == {proto}
            # the edge keeps a GPU's process list while its processes stay (but for utilization): old
            # agents' full snapshots get the collector's work per change too
            shared = sum(a.processes is b.processes and bool(a.processes)
                         for prev, cur in zip(snaps, snaps[1:], strict=False)
                         for a, b in zip(prev.gpus, cur.gpus, strict=True))
            assert shared > 0, name
        new = _snapshots(sink, "new-1")
        assert states["new-1"].hello is not None and states["new-1"].hello.delta is True
        protos = [s.proto for s in new]
        assert protos[0] == wire.FRAME_PROTO and protos[-1] == "1.3", protos  # full ones, then deltas
        assert protos.count("1.3") >= 8
    finally:
        for fleet in fleets.values():
            await fleet.stop()


async def test_a_delta_that_does_not_apply_asks_for_a_keyframe(sink: CollectingSink,
                                                             transport_for: MakeTransport) -> None:
    async with SimFleet(["sim-1"], mode="inproc", interval=0.2, gpus=2, procs=3) as fleet:
        t = transport_for(fleet.host_configs(), sink)
        await t.start()
        await sink.wait_for(lambda: sum(s.proto == "1.3" for s in _snapshots(sink, "sim-1")) >= 3,
                            what="deltas flowing")
        before = len(_snapshots(sink, "sim-1"))
        # a delta whose base was never sent (as if a line had been lost on the way)
        stray = json.loads(FrameGenerator("sim-1", fleet.gpus, procs=fleet.procs).delta(5))
        stray["base"] = 10**9
        fleet.inject("sim-1", json.dumps(stray).encode() + b"\n")
        await sink.wait_for(lambda: t.states()["sim-1"].delta_mismatches >= 1, what="the stray delta dropped")
        await sink.wait_for(lambda: any(s.proto == wire.FRAME_PROTO
                                        for s in _snapshots(sink, "sim-1")[before:]),
                            what="a keyframe after the resync")
        after = _snapshots(sink, "sim-1")[-1]
        await sink.wait_for(lambda: _snapshots(sink, "sim-1")[-1].proto == "1.3" and
                            _snapshots(sink, "sim-1")[-1].seq > after.seq, what="deltas again")
        state = t.states()["sim-1"]
        assert state.status == "up" and state.reconnects == 0 and state.bad_frames == 0


async def test_an_agent_that_cannot_hear_the_collector_offers_no_deltas(sink: CollectingSink,
                                                                        transport_for: MakeTransport) -> None:
    if not real_agent_works():
        pytest.skip("the real agent does not stream here")
    async with SimFleet(["deaf-1"], interval=0.2, agent_argv=REAL) as fleet:
        t = transport_for(fleet.host_configs(agent_args=["--fake", "busy", "--no-stdin-watch"]), sink)
        await t.start()
        await sink.wait_for(lambda: len(_snapshots(sink, "deaf-1")) >= 6, what="snapshots")
        hello = t.states()["deaf-1"].hello
        assert hello is not None and hello.proto == wire.PROTO_VERSION and hello.delta is None
        assert {s.proto for s in _snapshots(sink, "deaf-1")} == {wire.FRAME_PROTO}
