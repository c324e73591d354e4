"""Dead hosts cost a timer, not a connect slot: reachable hosts come up while black holes still time out.

Two kinds of black hole on loopback, no other addresses needed:
- "dropped": a listener with backlog 0 whose one queue place is taken; Linux drops SYNs to a full accept
  queue, so a TCP connect hangs like one to a powered-off host;
- "silent": a listener that never accepts; the kernel completes TCP but no SSH banner ever comes (a host
  whose kernel answers while sshd is wedged).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Iterator

import pytest
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.simfleet import SimFleet

from tests.transport.sshtestlib import CollectingSink, MakeTransport

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def black_holes() -> Iterator[tuple[int, int]]:
    """(dropped port, silent port)."""
    dropped = socket.socket()
    silent = socket.socket()
    filler = socket.socket()
    try:
        dropped.bind((LOOPBACK, 0))
        dropped.listen(0)
        filler.connect(dropped.getsockname())  # takes the one place in the accept queue
        probe = socket.socket()
        probe.settimeout(0.3)
        try:
            probe.connect(dropped.getsockname())
            pytest.skip("this kernel does not drop SYNs to a full accept queue")
        except TimeoutError:
            pass
        finally:
            probe.close()
        silent.bind((LOOPBACK, 0))
        silent.listen(128)
        yield dropped.getsockname()[1], silent.getsockname()[1]
    finally:
        for s in (filler, dropped, silent):
            s.close()


def _holes(template: HostConfig, dropped: int, silent: int, n: int, **kw: object) -> list[HostConfig]:
    return [dataclasses.replace(template, name=f"hole-{i:02d}", address=LOOPBACK,  # type: ignore[arg-type]
                                port=dropped if i % 2 else silent, **kw) for i in range(n)]


async def test_reachable_hosts_do_not_queue_behind_black_holes(sink: CollectingSink,
                                                               transport_for: MakeTransport) -> None:
    async with SimFleet(20, mode="inproc", interval=0.2, shared_server=True) as fleet:
        with black_holes() as (dropped, silent):
            good = fleet.host_configs(connect_timeout=30.0)
            holes = _holes(good[0], dropped, silent, 40, connect_timeout=30.0)
            # the black holes are dialled first, so before the fix they took every slot for 30 s
            t = transport_for(holes + good, sink, max_concurrent_connects=8)
            await t.start()
            await sink.wait_for(lambda: all(t.states()[h.name].status == "up" for h in good), timeout=25.0,
                                what="every reachable host up")
            states = t.states()
            # every black hole is still on its first connect timer: nobody waited for them to give up
            assert all(states[h.name].status == "connecting" and states[h.name].reconnects == 0
                       for h in holes), [(h.name, states[h.name].status) for h in holes]
            assert not any(sink.reasons(h.name) for h in holes)
            # the bound still holds for the handshakes themselves, and each host was reached once
            assert 2 <= fleet.handshakes.peak <= 8, fleet.handshakes.peak
            assert fleet.handshakes.accepted == len(good)


async def test_black_holes_report_the_connect_timeout(sink: CollectingSink,
                                                      transport_for: MakeTransport) -> None:
    with black_holes() as (dropped, silent):
        template = HostConfig(name="t", address=LOOPBACK, user="nobody")
        holes = _holes(template, dropped, silent, 2, connect_timeout=0.3)
        t = transport_for(holes, sink, max_concurrent_connects=1)
        await t.start()
        await sink.wait_for(lambda: all(sink.reasons(h.name) for h in holes), what="both down")
        for h in holes:
            assert sink.reasons(h.name)[0] == f"cannot connect to {LOOPBACK}:{h.port}: timed out after 0.3 s"


async def test_socket_that_waited_too_long_for_a_slot_is_replaced(sink: CollectingSink,
                                                                  transport_for: MakeTransport) -> None:
    n = 6
    async with SimFleet(n, mode="inproc", interval=0.2, shared_server=True) as fleet:
        t = transport_for(fleet.host_configs(), sink, max_concurrent_connects=2)
        t._ssh.fresh_for = -1.0  # every socket counts as stale: each host is reached twice
        await t.start()
        await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()), what="all up")
        assert fleet.handshakes.accepted == 2 * n
        assert fleet.handshakes.peak <= 2


async def test_refused_keeps_its_reason(sink: CollectingSink, transport_for: MakeTransport) -> None:
    # (name resolution is not exercised here: a lookup could leave loopback; test_stream_units covers it)
    closed = socket.socket()
    closed.bind((LOOPBACK, 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    t = transport_for([HostConfig(name="refused", address=LOOPBACK, port=port, user="nobody")], sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("refused")), what="down")
    assert sink.reasons("refused")[0] == f"cannot connect to {LOOPBACK}:{port}: Connection refused"
