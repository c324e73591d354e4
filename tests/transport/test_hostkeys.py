"""Host keys: a changed key is refused loudly, an unknown one per policy; verification cannot be disabled."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from gpufleet.collector.errors import ConfigError, HostKeyError
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.hostkeys import KnownHostsStore
from gpufleet.collector.transport.manager import FleetTransport
from gpufleet.collector.transport.ssh import SshContext, open_connection

from tests.transport.sshtestlib import CollectingSink, MakeTransport


async def test_changed_host_key_is_refused_and_only_that_host(fleet: SimFleet, sink: CollectingSink,
                                                              transport_for: MakeTransport) -> None:
    await fleet.rekey("sim-002")  # reinstalled (or intercepted): known_hosts still has the old key
    t = transport_for(fleet.host_configs(), sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("sim-002")) and t.states()["sim-001"].status == "up"
                        and t.states()["sim-003"].status == "up")
    reason = sink.reasons("sim-002")[0]
    new = fleet.hosts["sim-002"].host_key
    assert new is not None
    assert reason.startswith(f"host key changed: 127.0.0.1:{fleet.hosts['sim-002'].port} offers ssh-ed25519 "
                             f"{new.get_fingerprint('sha256')}; ")  # the key to check on the console
    assert f"{fleet.known_hosts_path}:2 has another key" in reason  # file and line named
    assert f"ssh-keygen -R '[127.0.0.1]:{fleet.hosts['sim-002'].port}' -f {fleet.known_hosts_path}" in reason
    assert t.states()["sim-002"].status == "down" and t.states()["sim-002"].connects == 0


async def test_changed_key_error_wording(fleet: SimFleet) -> None:
    await fleet.rekey("sim-001")
    cfg = fleet.host_configs()[0]
    ctx = SshContext({cfg.name: cfg}, asyncio.Semaphore(4))
    with pytest.raises(HostKeyError) as info:
        await open_connection(cfg, ctx)
    text = str(info.value)
    assert text.startswith("sim-001: HOST KEY CHANGED: 127.0.0.1:")
    assert f"{fleet.known_hosts_path}:1" in text


async def test_host_key_errors_retry_slowly(fleet: SimFleet, sink: CollectingSink,
                                            transport_for: MakeTransport) -> None:
    await fleet.rekey("sim-001")
    t = transport_for(fleet.host_configs()[:1], sink, backoff_base=0.01, backoff_cap=30.0)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("sim-001")))
    await asyncio.sleep(0.5)
    # with a 0.01 s base a transient error would have retried many times by now; a key error waits
    assert t.states()["sim-001"].reconnects == 0
    assert fleet.hosts["sim-001"].sessions_started == 0


async def test_unknown_host_refused_under_strict(fleet: SimFleet, sink: CollectingSink,
                                                 transport_for: MakeTransport) -> None:
    empty = fleet.dir / "empty_known_hosts"
    empty.write_text("")
    t = transport_for(fleet.host_configs(known_hosts=str(empty)), sink)
    await t.start()
    await sink.wait_for(lambda: all(s.status == "down" for s in t.states().values()))
    for name in fleet.hosts:
        reason = t.states()[name].reason
        assert reason is not None and reason.startswith("host key unknown: 127.0.0.1:")
        assert f"not in {empty}" in reason and "accept-new" in reason and "ssh-keyscan -p" in reason
    assert empty.read_text() == ""


async def test_accept_new_records_then_strict_trusts(fleet: SimFleet, sink: CollectingSink,
                                                     transport_for: MakeTransport) -> None:
    kh = fleet.dir / "tofu_known_hosts"
    t = transport_for(fleet.host_configs(known_hosts=str(kh), host_key_policy="accept-new"), sink)
    await t.start()
    await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()))
    lines = kh.read_text().splitlines()
    assert sorted(lines) == sorted(
        f"[127.0.0.1]:{h.port} ssh-ed25519 {h.host_key.export_public_key().decode().split()[1]}"  # type: ignore
        for h in fleet.hosts.values())
    await t.stop()
    # the recorded keys are trusted from now on, even under strict
    sink2 = CollectingSink()
    t2 = transport_for(fleet.host_configs(known_hosts=str(kh)), sink2)
    await t2.start()
    await sink2.wait_for(lambda: all(s.status == "up" for s in t2.states().values()))
    # and a key that changes after being recorded is still refused under accept-new
    await fleet.rekey("sim-003")
    sink3 = CollectingSink()
    t3 = transport_for(fleet.host_configs(known_hosts=str(kh), host_key_policy="accept-new")[2:], sink3)
    await t3.start()
    await sink3.wait_for(lambda: bool(sink3.reasons("sim-003")))
    assert sink3.reasons("sim-003")[0].startswith("host key changed:")


def test_disabling_verification_is_rejected(tmp_path: object) -> None:
    from gpufleet.collector.settings import HostConfig

    bad = dataclasses.replace(HostConfig(name="x"), host_key_policy="off")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cannot be disabled"):
        FleetTransport([bad], LiveView([CollectingSink()]))


def test_known_hosts_parsed_once_and_reloaded_on_change(tmp_path: object) -> None:
    from pathlib import Path

    import asyncssh

    path = Path(str(tmp_path)) / "known_hosts"
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_text(f"# comment\n[127.0.0.1]:2222 {key.export_public_key().decode()}")
    store = KnownHostsStore()
    first = store.get(str(path))
    assert store.get(str(path)).known is first.known  # unchanged file: same parsed object
    assert first.match("127.0.0.1", "127.0.0.1", 2222) == [key.convert_to_public()]
    assert first.lines_for("127.0.0.1", "127.0.0.1", 2222, [key]) == [2]
    other = asyncssh.generate_private_key("ssh-ed25519")
    path.write_text(f"bogus line without key\n127.0.0.1 {other.export_public_key().decode()}")
    again = store.get(str(path))
    assert again.match("127.0.0.1", "127.0.0.1", 22) == [other.convert_to_public()]
    assert again.match("127.0.0.1", "127.0.0.1", 2222) == [other.convert_to_public()]  # port fallback


async def test_accept_new_with_many_hosts_behind_one_address(sink: CollectingSink,
                                                             transport_for: MakeTransport) -> None:
    # 20 virtual hosts share one server (one address, one key) and handshake concurrently
    async with SimFleet(20, mode="inproc", interval=0.2, shared_server=True) as fleet:
        kh = fleet.dir / "tofu"
        t = transport_for(fleet.host_configs(known_hosts=str(kh), host_key_policy="accept-new"), sink)
        await t.start()
        await sink.wait_for(lambda: all(s.status == "up" for s in t.states().values()), what="all 20 up")
        assert len(kh.read_text().splitlines()) == 1
        await t.stop()
