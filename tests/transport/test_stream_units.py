"""Line framing, frame validation and backoff, without any network."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from gpufleet.agent import wire
from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.transport.backoff import Backoff
from gpufleet.collector.transport.stream import AgentStream, LineFramer

from tests.transport.sshtestlib import CollectingSink


def test_framer_joins_chunks_and_splits_lines() -> None:
    f = LineFramer(100)
    assert list(f.feed(b"ab")) == []
    assert list(f.feed(b"c\nde\nf")) == [b"abc\n", b"de\n"]
    assert f.pending == 1
    assert list(f.feed(b"\n")) == [b"f\n"]


def test_framer_refuses_a_long_line_without_buffering_it() -> None:
    f = LineFramer(1000)
    assert list(f.feed(b"x" * 600)) == []
    with pytest.raises(wire.FrameTooLarge, match="exceeds the 1000-byte bound"):
        list(f.feed(b"x" * 600))
    assert f.pending == 0  # nothing of the oversized line is kept


def test_framer_bound_includes_the_newline() -> None:
    f = LineFramer(10)
    assert list(f.feed(b"123456789\n")) == [b"123456789\n"]  # 10 bytes: fits
    with pytest.raises(wire.FrameTooLarge, match="line of 11 bytes"):
        list(f.feed(b"1234567890\n"))


def _hello() -> bytes:
    return wire.encode(wire.Hello(agent_version="9.9", hostname="liar", ts=100.0, driver_version="550.1"))


async def test_stream_validates_and_updates_state() -> None:
    sink = CollectingSink()
    live = LiveView([sink])  # owns the state and records each frame on it
    state = live.add_host("h1")
    ups: list[wire.Hello] = []
    s = AgentStream(state, live, clock=lambda: 101.5, on_up=ups.append)
    s.feed(_hello() + b"\n" + wire.encode(wire.Heartbeat(ts=101.0, seq=1)))
    assert [f.type for _, f, _ in sink.frames] == ["hello", "heartbeat"]
    assert [h for h, _, _ in sink.frames] == ["h1", "h1"]
    assert len(ups) == 1 and state.frames == 2 and state.lag == 0.5 and state.last_seen == 101.5
    assert state.agent_version == "9.9" and state.driver_version == "550.1"
    assert state.reported_hostname == "liar"
    assert not s.done.done()
    s.feed(b"{not json\n" + wire.encode(wire.Heartbeat(ts=102.0)))
    assert s.done.result().startswith("protocol error: not valid JSON")
    assert state.bad_frames == 1 and state.frames == 2  # nothing after the bad line is taken


async def test_first_frame_must_be_hello() -> None:
    s = AgentStream(HostState(name="h"), CollectingSink())
    s.feed(wire.encode(wire.Heartbeat(ts=1.0)))
    assert s.done.result() == "protocol error: first frame is 'heartbeat', expected 'hello'"


async def test_read_deadline() -> None:
    s = AgentStream(HostState(name="h"), CollectingSink())
    assert await s.wait(0.05) == "no frame for 0.05 s"
    assert s.timed_out


async def test_exit_reasons_use_stderr() -> None:
    s = AgentStream(HostState(name="h"), CollectingSink())
    s.feed_stderr(b"Traceback...\nRuntimeError: NVML Shared Library Not Found\n")
    s.exited(1)
    assert s.done.result() == "agent exited with status 1: RuntimeError: NVML Shared Library Not Found"


def test_backoff_is_exponential_capped_and_jittered() -> None:
    b = Backoff(1.0, 60.0, rng=random.Random(7))
    ceilings, delays = [], []
    for _ in range(9):
        ceilings.append(b.ceiling())
        delays.append(b.next())
    assert ceilings == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    again = Backoff(1.0, 60.0, rng=random.Random(7))
    assert [again.next() for _ in range(9)] == delays  # deterministic with a seeded rng


def test_backoff_resets_only_after_a_stable_connection() -> None:
    b = Backoff(1.0, 60.0, stable_after=30.0, rng=random.Random(1))
    for _ in range(5):
        b.next()
    b.connection_ended(5.0)
    assert b.ceiling() == 32
    b.connection_ended(None)
    assert b.ceiling() == 32
    b.connection_ended(31.0)
    assert b.ceiling() == 1


def test_backoff_slow_stays_near_the_cap() -> None:
    b = Backoff(1.0, 60.0, rng=random.Random(3))
    assert all(30.0 <= b.slow() <= 60.0 for _ in range(50))


def test_full_jitter_spreads_a_returning_fleet() -> None:
    rng = random.Random(42)
    hosts = [Backoff(1.0, 60.0, rng=random.Random(rng.random())) for _ in range(200)]
    for h in hosts:  # all failed together a few times
        for _ in range(4):
            h.next()
    delays = sorted(h.next() for h in hosts)  # the window is now [0, 16)
    assert len(set(delays)) == 200
    # no second of the window holds more than a fifth of the fleet
    per_second = [sum(1 for d in delays if s <= d < s + 1) for s in range(16)]
    assert max(per_second) < 40


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(0.0, 1.0)


def test_connect_error_wording() -> None:
    import socket

    from gpufleet.collector.settings import HostConfig
    from gpufleet.collector.transport.hostkeys import HostKeyVerifier, KnownHostsFile
    from gpufleet.collector.transport.ssh import _connect_error

    host = HostConfig(name="gpu07", address="gpu07.cluster.example", port=22)
    verifier = HostKeyVerifier("gpu07", KnownHostsFile(Path("/nonexistent/known_hosts")), "strict")
    dns = _connect_error(host, socket.gaierror(socket.EAI_NONAME, "Name or service not known"), verifier)
    assert str(dns) == "gpu07: cannot resolve gpu07.cluster.example: Name or service not known"
    refused = _connect_error(host, ConnectionRefusedError(111, "Connect call failed"), verifier)
    assert str(refused) == "gpu07: cannot connect to gpu07.cluster.example:22: Connection refused"
