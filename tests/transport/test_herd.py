"""200 hosts at once: the connect bound holds the number of handshakes in flight, and a fleet that drops
together comes back spread over the backoff window (full jitter), not in one wave. Real SSH on loopback."""

from __future__ import annotations

import socket
import time

import pytest
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport import ssh

from tests.transport.sshtestlib import CollectingSink, MakeTransport

N = 200


def _all_up(sink: CollectingSink, names: object) -> bool:
    return all(sink.latest.get(n) is not None and sink.latest[n].status == "up" for n in names)  # type: ignore


async def test_connect_bound_limits_handshakes_in_flight(sink: CollectingSink,
                                                         transport_for: MakeTransport) -> None:
    async with SimFleet(N, mode="inproc", interval=0.5, shared_server=True) as fleet:
        t = transport_for(fleet.host_configs(), sink, max_concurrent_connects=8)
        await t.start()  # all 200 want to dial now
        await sink.wait_for(lambda: _all_up(sink, fleet.hosts), what="all 200 up")
        # seen from the server: never more than 8 handshakes (client speaks -> auth done) at once ...
        assert fleet.handshakes.peak <= 8, fleet.handshakes.peak
        assert fleet.handshakes.peak >= 2  # ... and they did overlap (the bound was what held them)
        assert fleet.handshakes.now == 0
        peak_at_start = fleet.handshakes.peak
        fleet.handshakes.peak = 0
        # the same bound holds when they all come back after a blip
        assert fleet.drop() == N
        await sink.wait_for(lambda: all(h.connects == 2 for h in t.states().values()), what="all back")
        assert fleet.handshakes.peak <= 8, (peak_at_start, fleet.handshakes.peak)


async def test_fleet_that_drops_together_returns_spread_out(
        sink: CollectingSink, transport_for: MakeTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    window = 3.0  # the first retry after a drop waits uniform(0, window)
    dials: list[float] = []  # when a host's backoff ended and it dialled (reached for the server)
    reach = ssh.reach

    async def timed_reach(address: str, port: int, timeout: float) -> socket.socket:
        dials.append(time.monotonic())
        return await reach(address, port, timeout)

    monkeypatch.setattr(ssh, "reach", timed_reach)
    async with SimFleet(N, mode="inproc", interval=0.5, shared_server=True) as fleet:
        t = transport_for(fleet.host_configs(), sink, max_concurrent_connects=N, backoff_base=window,
                          backoff_cap=window)
        await t.start()
        await sink.wait_for(lambda: _all_up(sink, fleet.hosts), what="all 200 up")
        dropped_at = time.monotonic()
        assert fleet.drop() == N  # a switch reboots: every connection gone in the same instant
        await sink.wait_for(lambda: all(h.connects == 2 for h in t.states().values()), timeout=30,
                            what="all 200 back")
        assert all(len(h.session_times) == 2 for h in fleet.hosts.values())  # one reconnect each
        # A herd would dial all 200 at once. Full jitter spreads the dials over the window: the busiest half
        # second sees about 200 / 6 of them. (The dials, not the sessions the server saw start: the server
        # shares this process, and on a loaded machine it finishes queued handshakes in bursts.)
        back = sorted(d - dropped_at for d in dials if d >= dropped_at)
        assert len(back) >= N, len(back)
        busiest = max(sum(1 for b in back if start <= b < start + 0.5) for start in back)
        assert busiest <= N * 0.4, (busiest, back[:5], back[-5:])
        p10, p90 = back[N // 10], back[N * 9 // 10]
        assert p90 - p10 >= window * 0.4, (p10, p90)
        # and nobody flapped through down twice
        assert sum(1 for n in fleet.hosts if sink.statuses(n) != ["connecting", "up", "down", "up"]) == 0
