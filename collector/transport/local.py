"""``transport: local``: the collector's own host, the agent as a child process, no SSH.

Same :class:`AgentStream` as SSH, so a local host fails, times out and reconnects exactly like a remote one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import sys

from gpufleet.collector.errors import AgentError
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.transport.stream import AgentStream

log = logging.getLogger(__name__)

DEFAULT_AGENT = "gpufleet-agent"


def local_argv(host: HostConfig) -> list[str]:
    """The agent's argv: ``agent_command`` if it resolves, else this interpreter's ``-m gpufleet.agent``."""
    base = shlex.split(host.agent_command) if host.agent_command else [DEFAULT_AGENT]
    if base == [DEFAULT_AGENT]:
        # prefer the agent installed next to this collector, then PATH, then the module itself
        beside = os.path.join(os.path.dirname(sys.executable), DEFAULT_AGENT)
        found = beside if os.access(beside, os.X_OK) else shutil.which(DEFAULT_AGENT)
        base = [found] if found else [sys.executable, "-m", "gpufleet.agent"]
    return [*base, "--interval", f"{host.interval:g}", *host.agent_args]


def signal_name(number: int) -> str:
    """``9`` -> ``"KILL"``; a signal without a name (real-time ones: 35..63 on Linux) as its number."""
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


class _AgentProtocol(asyncio.SubprocessProtocol):
    def __init__(self, stream: AgentStream) -> None:
        self.stream = stream
        self.exited = asyncio.get_running_loop().create_future()
        self.transport: asyncio.SubprocessTransport | None = None
        self._stdout_open = True
        self._code: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.stream.feed(data)
        else:
            self.stream.feed_stderr(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._stdout_open = False
            self._report()

    def process_exited(self) -> None:
        assert self.transport is not None
        self._code = self.transport.get_returncode()
        if not self.exited.done():
            self.exited.set_result(None)
        self._report()

    def _report(self) -> None:
        # asyncio may report the exit before the last stdout bytes: wait for both, so no frame is lost
        if self._stdout_open or not self.exited.done():
            return
        code = self._code
        if code is not None and code < 0:
            self.stream.exited(None, signal_name(-code))
        else:
            self.stream.exited(code)


async def run_local(host: HostConfig, stream: AgentStream) -> str:
    """Run the agent here until the stream ends; returns why. Raises AgentError if it cannot start."""
    argv = local_argv(host)
    loop = asyncio.get_running_loop()
    try:
        transport, proto = await loop.subprocess_exec(
            lambda: _AgentProtocol(stream), *argv, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise AgentError(host.name, f"cannot start the agent ({shlex.join(argv)}): {exc}") from None
    stdin = transport.get_pipe_transport(0)
    if isinstance(stdin, asyncio.WriteTransport):
        stream.attach_control(stdin.write)  # the agent's stdin: delta negotiation (agent/delta.py)
    stream.started()
    try:
        ended: str = await stream.wait(host.effective_read_timeout)
        return ended
    finally:
        await _shutdown(transport, proto, stream)


async def _shutdown(transport: asyncio.SubprocessTransport, proto: _AgentProtocol,
                    stream: AgentStream) -> None:
    """EOF first (the agent's normal exit); SIGKILL if it does not go, or at once if it was hung."""
    if not proto.exited.done():
        if stream.timed_out:
            with contextlib.suppress(ProcessLookupError):
                transport.kill()
        else:
            stdin = transport.get_pipe_transport(0)
            if stdin is not None:
                stdin.close()
        try:
            await asyncio.wait_for(asyncio.shield(proto.exited), stream.grace)
        except (asyncio.TimeoutError, TimeoutError):
            with contextlib.suppress(ProcessLookupError):
                transport.kill()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(proto.exited), 2.0)
    transport.close()
