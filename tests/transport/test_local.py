"""``transport: local``: the same stream rules, the agent as a child process."""

from __future__ import annotations

import os
import shlex
import signal
import sys

from gpufleet.collector.settings import HostConfig
from gpufleet.collector.transport.local import local_argv

from tests.transport.sshtestlib import STANDIN, CollectingSink, MakeTransport, real_agent_works


def _local(**kw: object) -> HostConfig:
    command = "gpufleet-agent" if real_agent_works() else shlex.join(STANDIN)
    return HostConfig(name="here", transport="local", agent_command=command, interval=0.1,
                      agent_args=["--fake", "busy"], **kw)  # type: ignore[arg-type]


def test_default_command_resolves_to_this_installation() -> None:
    argv = local_argv(HostConfig(name="here", transport="local", interval=2))
    assert argv[-2:] == ["--interval", "2"]
    assert os.access(argv[0], os.X_OK)  # the agent next to this interpreter, or the interpreter itself
    assert argv[0].endswith("gpufleet-agent") or argv[:3] == [sys.executable, "-m", "gpufleet.agent"]


async def test_local_agent_streams_and_restarts_after_a_kill(sink: CollectingSink,
                                                             transport_for: MakeTransport) -> None:
    t = transport_for([_local()], sink)
    await t.start()
    await sink.wait_for(lambda: sink.count("here", "snapshot") >= 2, what="local snapshots")
    st = t.states()["here"]
    assert st.status == "up" and st.agent_version
    # find our agent child and kill it
    children = _children()
    assert children
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    await sink.wait_for(lambda: t.states()["here"].connects == 2, what="local agent restarted")
    assert sink.reasons("here")[0] == "agent killed by signal KILL"


async def test_local_agent_hung(sink: CollectingSink, transport_for: MakeTransport) -> None:
    t = transport_for([_local(read_timeout=0.5)], sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["here"].status == "up")
    for pid in _children():
        os.kill(pid, signal.SIGSTOP)
    await sink.wait_for(lambda: bool(sink.reasons("here")))
    assert sink.reasons("here")[0] == "no frame for 0.5 s"
    await sink.wait_for(lambda: t.states()["here"].connects == 2)


async def test_local_agent_that_cannot_start(sink: CollectingSink, transport_for: MakeTransport) -> None:
    cfg = HostConfig(name="here", transport="local", agent_command="/nonexistent/gpufleet-agent")
    t = transport_for([cfg], sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("here")))
    reason = sink.reasons("here")[0]
    assert reason.startswith("cannot start the agent (/nonexistent/gpufleet-agent --interval 1)"), reason


async def test_local_stop_is_a_clean_eof(sink: CollectingSink, transport_for: MakeTransport) -> None:
    t = transport_for([_local()], sink)
    await t.start()
    await sink.wait_for(lambda: t.states()["here"].status == "up")
    pids = _children()
    await t.stop(timeout=5)
    assert t.states()["here"].reason == "collector stopping"
    assert not [p for p in pids if _exists(p)]


def _children() -> list[int]:
    """Live child processes of this test process (the local agent runs as one)."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] not in ("Z", "T"):
            out.append(int(entry))
    return out


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_local_agent_killed_by_a_signal_without_a_name(sink: CollectingSink,
                                                             transport_for: MakeTransport) -> None:
    """Real-time signals have numbers only: the exit is still reported at once, not as a read timeout."""
    die = f"{shlex.quote(sys.executable)} -c 'import os; os.kill(os.getpid(), 40)'"
    cfg = HostConfig(name="here", transport="local", agent_command=die, read_timeout=60.0)
    t = transport_for([cfg], sink)
    await t.start()
    await sink.wait_for(lambda: bool(sink.reasons("here")), timeout=10.0)
    assert sink.reasons("here")[0] == "agent killed by signal 40"
