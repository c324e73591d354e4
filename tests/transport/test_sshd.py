"""Against OpenSSH's own sshd: streaming from the installed agent, and the forced-command deploy line."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncssh
import pytest
from gpufleet.agent import wire

from tests.transport.opensshd import SSHD, Sshd, SshdUnavailable, running_sshd, sshd_tree, user
from tests.transport.sshtestlib import STANDIN, CollectingSink, MakeTransport, real_agent_works

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.sshd,
              pytest.mark.skipif(not os.path.exists(SSHD), reason="OpenSSH sshd not installed")]


def _agent_command(*args: str) -> str:
    """The installed agent next to this interpreter (the stand-in until the real one streams)."""
    if real_agent_works():
        return shlex.join([os.path.join(os.path.dirname(sys.executable), "gpufleet-agent"), *args])
    return shlex.join([*STANDIN, *args])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    try:
        with running_sshd(tmp_path) as server:
            yield server
    except SshdUnavailable as exc:
        pytest.skip(str(exc))


async def test_streams_from_the_installed_agent(sshd: Sshd, sink: CollectingSink,
                                                transport_for: MakeTransport) -> None:
    hosts = [sshd.host("real-a", agent_command=_agent_command(), agent_args=["--fake", "busy"]),
             sshd.host("real-b", agent_command=_agent_command(), agent_args=["--fake", "hot"])]
    t = transport_for(hosts, sink)
    await t.start()
    await sink.wait_for(lambda: all(sink.count(h.name, "snapshot") >= 2 for h in hosts),
                        what="snapshots via sshd")
    assert all(s.status == "up" and s.agent_version for s in t.states().values())
    await t.stop(timeout=5)
    assert all(s.reason == "collector stopping" for s in t.states().values())


async def test_missing_agent_is_a_clear_reason(sshd: Sshd, sink: CollectingSink,
                                               transport_for: MakeTransport) -> None:
    t = transport_for([sshd.host(agent_command="/nonexistent/gpufleet-agent")], sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("real")))
    reason = sink.reasons("real")[0]
    assert reason.startswith("agent exited with status 127: ") and "/nonexistent/gpufleet-agent" in reason


async def test_agent_killed_under_sshd(sshd: Sshd, sink: CollectingSink,
                                       transport_for: MakeTransport) -> None:
    t = transport_for([sshd.host(agent_command=_agent_command(), agent_args=["--fake", "idle"])], sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["real"].status == "up")
    pids = _agent_pids(sshd.pid)
    assert pids
    for pid in pids:
        os.kill(pid, 9)
    await sink.wait_for(lambda: t.states()["real"].connects == 2, what="reconnect after kill under sshd")
    assert sink.reasons("real")[0].startswith(("agent killed by signal KILL", "agent exited with status"))


async def test_maintenance_hold_lets_the_agent_exit_under_sshd(sshd: Sshd, sink: CollectingSink,
                                                              transport_for: MakeTransport) -> None:
    """Holding a host for maintenance closes the session: under OpenSSH's sshd the agent reads EOF and exits
    (the GPUs' device files are free), and the collector does not dial again until the hold is released."""
    t = transport_for([sshd.host(agent_command=_agent_command(), agent_args=["--fake", "idle"])], sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["real"].status == "up")
    [before] = _agent_pids(sshd.pid)
    t.hold("real", "nvidia-smi -r (by root)")
    await sink.wait_for(lambda: not _agent_pids(sshd.pid), timeout=10, what="the agent under sshd to exit")
    await asyncio.sleep(1.5)
    assert _agent_pids(sshd.pid) == [] and t.states()["real"].connects == 1, "a held host was dialled"
    assert t.states()["real"].status == "maintenance"
    t.release("real")
    await sink.wait_for(lambda: t.states()["real"].connects == 2, what="reconnect after release")
    after = _agent_pids(sshd.pid)
    assert after and before not in after


def _agent_pids(sshd_pid: int) -> list[int]:
    """Agent processes descended from *our* sshd (other work on this machine is left alone)."""
    parent: dict[int, int] = {}
    cmdline: dict[int, list[bytes]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])

    def under_sshd(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == sshd_pid:
                return True
        return False

    return [p for p, cmd in cmdline.items() if b"--fake" in cmd and under_sshd(p)]


def _example_line() -> str:
    text = (REPO / "deploy" / "authorized_keys.example").read_text()
    [line] = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return line


def test_example_line_format() -> None:
    m = re.fullmatch(r'restrict,command="([^"]+)" (ssh-ed25519) (\S+) (\S+)', _example_line())
    assert m, _example_line()
    assert shlex.split(m.group(1))[0].endswith("gpufleet-agent")


@pytest.fixture
async def forced(sshd: Sshd) -> AsyncIterator[Sshd]:
    """The deploy example line, with this test's key and agent substituted."""
    m = re.fullmatch(r'(restrict,command=")([^"]+)(") (ssh-ed25519) (\S+) (\S+)', _example_line())
    assert m
    command = _agent_command("--fake", "busy", "--interval", "0.2")
    line = f'{m.group(1)}{command}{m.group(3)} {sshd.client_pub.split()[0]} {sshd.client_pub.split()[1]} ' \
           f'{m.group(6)}'
    sshd.authorized_keys.write_text(line + "\n")
    yield sshd


async def test_forced_command_works_with_the_collector(forced: Sshd, sink: CollectingSink,
                                                       transport_for: MakeTransport) -> None:
    # whatever the collector asks to run, sshd runs the forced agent
    t = transport_for([forced.host(agent_command="this-command-is-ignored")], sink)
    await t.start()
    await sink.wait_for(lambda: sink.count("real", "snapshot") >= 2, what="snapshots under a forced command")
    assert t.states()["real"].status == "up"


async def test_forced_command_refuses_other_commands(forced: Sshd) -> None:
    async with asyncssh.connect("127.0.0.1", forced.port, username=user(),
                                client_keys=[str(forced.client_key)], known_hosts=str(forced.known_hosts),
                                config=None, agent_path=None) as conn:
        proc = await conn.create_process("cat /etc/passwd", encoding=None)
        first = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert isinstance(wire.decode(first), wire.Hello)  # the agent, not the password file
        proc.stdin.write_eof()
        await asyncio.wait_for(proc.wait(check=False), 20)
        # no shell either: restrict also refuses a pty, and a subsystem still gets only the agent
        with pytest.raises((asyncssh.Error, OSError, asyncio.TimeoutError, AssertionError)):
            async with conn.start_sftp_client() as sftp:
                await asyncio.wait_for(sftp.listdir("/"), 5)


async def test_a_host_back_from_a_freeze_is_up_within_10_s(sshd: Sshd, sink: CollectingSink,
                                                           transport_for: MakeTransport) -> None:
    """Issue 33: sshd stopped (SIGSTOP, as a host whose sshd hangs) for 30 s, then SIGCONT: the host is up
    again within 10 s. The dials while it was frozen reached TCP but no banner; before, each such failure grew
    the handshake backoff (8 s doubling here, with this seed the old code waited 43.7 s after the thaw);
    now a host that does not answer is probed every few seconds and dialled when it answers."""
    import random
    import signal

    host = dataclasses.replace(sshd.host(agent_command=_agent_command(), agent_args=["--fake", "idle"]),
                               connect_timeout=3.0)
    t = transport_for([host], sink, backoff_base=8.0, backoff_cap=60.0, rng=random.Random(4))
    await t.start()
    await sink.wait_for(lambda: t.states()["real"].status == "up", what="up")
    stopped = sshd_tree(sshd.pid)
    assert sshd.pid in stopped
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        await sink.wait_for(lambda: t.states()["real"].status == "down", timeout=30, what="down while frozen")
        await asyncio.sleep(30.0)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    thawed = time.monotonic()
    await sink.wait_for(lambda: t.states()["real"].status == "up", timeout=60, what="up after the thaw")
    took = time.monotonic() - thawed
    assert took <= 10.0, f"up {took:.1f} s after the thaw"
    assert t.states()["real"].connects == 2
