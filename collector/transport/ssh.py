"""One SSH session to one host: reach it (reach.py), dial (through a jump host if configured), verify the
host key, run the agent (installed, or the uploaded zipapp), and pump its stdout into an
:class:`AgentStream`.

Everything asyncssh-specific lives here; failures leave as :class:`TransportError` subclasses with the
host in the message. The manager decides about retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import socket
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from gpufleet.collector.errors import AgentError, ConfigError, HostUnreachable, TransportError
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.transport.hostkeys import HostKeyRefused, HostKeyVerifier, KnownHostsStore
from gpufleet.collector.transport.reach import reach
from gpufleet.collector.transport.sshlib import asyncssh
from gpufleet.collector.transport.stream import AgentStream
from gpufleet.collector.transport.zipapp import AgentZipapp, build_agent_zipapp, ensure_uploaded

log = logging.getLogger(__name__)

T = TypeVar("T")

#: AES-GCM first: with AES-NI it costs less CPU per byte than asyncssh's chacha20-poly1305, and a
#: collector with 1,000 hosts spends most of its time decrypting.
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                   "aes128-ctr", "aes256-ctr"]
CLOSE_GRACE = 2.0
MAX_JUMP_DEPTH = 4
#: A reached socket that waited longer than this for a connect slot is replaced by a fresh one before the
#: handshake. The server's login timer runs from accept (OpenSSH LoginGraceTime: 120 s by default, 30 s or
#: less on hardened hosts), and the wait is not counted in connect_timeout, so that a large fleet starting
#: at once (queueing for slots by design) does not time out. 15 s keeps clear of a 30 s grace time.
FRESH_FOR = 15.0


class SshContext:
    """What every SSH session of one fleet shares: known_hosts files, client keys, the zipapp."""

    def __init__(self, hosts: Mapping[str, HostConfig], connect_slots: asyncio.Semaphore,
                 known_hosts: KnownHostsStore | None = None) -> None:
        self.hosts = hosts
        self.connect_slots = connect_slots
        self.fresh_for = FRESH_FOR
        self.known_hosts = known_hosts or KnownHostsStore()
        self._keys: dict[str, asyncssh.SSHKey] = {}
        self._zipapp: AgentZipapp | None = None

    def client_key(self, host: HostConfig) -> asyncssh.SSHKey | None:
        if not host.key:
            return None
        key = self._keys.get(host.key)
        if key is None:
            try:
                key = asyncssh.read_private_key(host.key)
            except (OSError, asyncssh.KeyImportError) as exc:
                raise ConfigError(f"cannot read private key {host.key}: {exc}",
                                  key=f"hosts.{host.name}.key") from None
            self._keys[host.key] = key
        return key

    def zipapp(self, host: str) -> AgentZipapp:
        """The agent zipapp, built once per collector process (and cached on disk by content)."""
        if self._zipapp is None:
            try:
                self._zipapp = build_agent_zipapp()
            except OSError as exc:
                raise AgentError(host, f"cannot build the agent zipapp: {exc} (set XDG_CACHE_HOME or "
                                       f"CACHE_DIRECTORY to a writable directory)") from None
        return self._zipapp

    def jump_host(self, host: HostConfig) -> HostConfig | None:
        """The jump host's settings: another inventory host by name, or ``[user@]host[:port]``."""
        if not host.jump:
            return None
        named = self.hosts.get(host.jump)
        if named is not None:
            return named
        spec = host.jump
        user, _, rest = spec.rpartition("@")
        addr, port = rest, 22
        if rest.startswith("["):
            addr, _, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = _port(tail[1:], host)
        elif rest.count(":") == 1:
            addr, port_s = rest.split(":")
            port = _port(port_s, host)
        return replace(host, name=f"{host.name} (jump {spec})", address=addr, port=port,
                       user=user or host.user, jump=None)


def _port(text: str, host: HostConfig) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"bad port in jump {host.jump!r}", key=f"hosts.{host.name}.jump") from None


class _Hooks(asyncssh.SSHClient):
    """Routes asyncssh's "is this unknown key acceptable?" question to our verifier."""

    def __init__(self, verifier: HostKeyVerifier) -> None:
        self.verifier = verifier

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        accepted: bool = self.verifier.check(host, addr, port, key)
        return accepted


class _AgentSession(asyncssh.SSHClientSession[bytes]):
    """Channel callbacks straight into the stream: no per-line task, no unbounded reader buffer."""

    def __init__(self, stream: AgentStream) -> None:
        self.stream = stream
        self.status: int | None = None
        self.signal: str | None = None

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            self.stream.feed_stderr(data)
        else:
            self.stream.feed(data)

    def exit_status_received(self, status: int) -> None:
        self.status = status

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self.signal = signal

    def connection_lost(self, exc: Exception | None) -> None:
        self.stream.exited(self.status, self.signal, exc)


def agent_command(host: HostConfig, uploaded: str | None = None) -> str:
    """The remote command line. ``agent_command`` is a shell fragment (it may be ``sudo -n ...``)."""
    args = shlex.join(["--interval", f"{host.interval:g}", *host.agent_args])
    if uploaded is not None:
        return f"{shlex.quote(host.python)} {shlex.quote(uploaded)} {args}"
    return f"{host.agent_command} {args}"


async def _until_stopped(aw: Awaitable[T], stream: AgentStream) -> T | None:
    """Await ``aw`` unless the stream is ended first (collector stopping): then cancel it, return None."""
    task = asyncio.ensure_future(aw)
    either: list[asyncio.Future[Any]] = [task, stream.done]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()  # asyncio.wait leaves it running: a dial must not outlive its session
        raise
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return None


def _connect_error(host: HostConfig, exc: BaseException, verifier: HostKeyVerifier) -> TransportError:
    where = f"{host.address or host.name}:{host.port}"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        if verifier.refusal is not None:
            return verifier.refusal
        kind = "revoked" if "revoked" in str(exc).lower() else "untrusted"
        return HostKeyRefused(host.name, kind, f"{where}: {exc.reason}")
    if isinstance(exc, asyncssh.PermissionDenied):
        return TransportError(host.name, f"authentication refused at {where} for user "
                                         f"{host.user or '(local user)'}: {exc.reason}")
    if isinstance(exc, asyncssh.DisconnectError):
        return TransportError(host.name, f"cannot connect to {where}: {exc.reason}")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return TransportError(host.name,
                              f"cannot connect to {where}: timed out after {host.connect_timeout:g} s")
    if isinstance(exc, socket.gaierror):
        # getaddrinfo's errors are negative EAI codes: os.strerror would say "Unknown error -2"
        return TransportError(host.name, f"cannot resolve {host.address or host.name}: {exc.strerror or exc}")
    if isinstance(exc, OSError):
        # asyncio words a refused connect as "Connect call failed (addr)": say what errno says
        text = os.strerror(exc.errno) if exc.errno else str(exc)
        return TransportError(host.name, f"cannot connect to {where}: {text}")
    return TransportError(host.name, f"cannot connect to {where}: {type(exc).__name__}: {exc}")


async def _dial(host: HostConfig, ctx: SshContext, tunnel: asyncssh.SSHClientConnection | None,
                ) -> asyncssh.SSHClientConnection:
    kh = ctx.known_hosts.get(host.known_hosts)
    verifier = HostKeyVerifier(host.name, kh, host.host_key_policy)
    options: dict[str, Any] = {
        "port": host.port,
        "known_hosts": kh.known,
        "config": None,  # the inventory is the whole truth; ~/.ssh/config does not silently change hosts
        "keepalive_interval": host.keepalive_interval,
        "keepalive_count_max": host.keepalive_count_max,
        "connect_timeout": host.connect_timeout,
        "client_factory": lambda: _Hooks(verifier),
        "encryption_algs": ENCRYPTION_ALGS,
    }
    if host.user:
        options["username"] = host.user
    key = ctx.client_key(host)
    if key is not None:
        options["client_keys"] = [key]
        options["agent_path"] = None  # an explicit key: do not also offer whatever ssh-agent holds
    address = host.address or host.name
    sock: socket.socket | None = None
    try:
        if tunnel is not None:  # the jump host's channel: nothing to reach first, the slot covers it all
            options["tunnel"] = tunnel
            async with ctx.connect_slots:
                return await _handshake(address, options, host)
        # a dead or wedged host costs a timer here, not a connect slot (see reach.py)
        sock = await _reach(host, address, verifier)
        reached = asyncio.get_running_loop().time()
        async with ctx.connect_slots:
            if asyncio.get_running_loop().time() - reached > ctx.fresh_for:
                # sshd's LoginGraceTime runs from accept: do not hand it a socket that idled in the queue
                sock.close()
                sock = None
                sock = await _reach(host, address, verifier)
            conn = await _handshake(address, {**options, "sock": sock}, host)
            sock = None  # the connection owns it now
            return conn
    except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as exc:
        raise _connect_error(host, exc, verifier) from None
    finally:
        if sock is not None:
            sock.close()


async def _reach(host: HostConfig, address: str, verifier: HostKeyVerifier) -> socket.socket:
    """:func:`reach`, its failures :class:`HostUnreachable` (retried on the probe period, not the backoff);
    a name that does not resolve is a plain TransportError (a typo must not cost a DNS query a second)."""
    try:
        return await reach(address, host.port, host.connect_timeout)
    except socket.gaierror as exc:
        raise _connect_error(host, exc, verifier) from None
    except (OSError, asyncio.TimeoutError) as exc:
        err = _connect_error(host, exc, verifier)
        raise HostUnreachable(host.name, str(err).removeprefix(f"{host.name}: ")) from None


async def _handshake(address: str, options: dict[str, Any], host: HostConfig) -> asyncssh.SSHClientConnection:
    """Key exchange and auth: asyncssh's connect_timeout bounds it, the outer wait_for is a backstop."""
    return await asyncio.wait_for(asyncssh.connect(address, **options), host.connect_timeout + 5.0)


async def open_connection(host: HostConfig, ctx: SshContext) -> list[asyncssh.SSHClientConnection]:
    """Connections from the outermost jump host to ``host`` (last). Closing them is the caller's job."""
    chain: list[HostConfig] = [host]
    while (jump := ctx.jump_host(chain[-1])) is not None:
        if len(chain) > MAX_JUMP_DEPTH or any(j.name == jump.name for j in chain):
            raise ConfigError(f"jump chain too long or circular: {' -> '.join(h.name for h in chain)}",
                              key=f"hosts.{host.name}.jump")
        chain.append(jump)
    conns: list[asyncssh.SSHClientConnection] = []
    try:
        for hop in reversed(chain):
            conns.append(await _dial(hop, ctx, conns[-1] if conns else None))
    except BaseException:
        for conn in conns:
            conn.close()
        raise
    return conns


async def run_ssh(host: HostConfig, stream: AgentStream, ctx: SshContext) -> str:
    """Run one session; returns why it ended. Raises TransportError (or HostKeyRefused) if it never began."""
    ended: str
    conns = await _until_stopped(open_connection(host, ctx), stream)
    if conns is None:
        ended = await stream.done
        return ended
    conn = conns[-1]
    try:
        uploaded: str | None = None
        if host.agent == "upload":
            app = ctx.zipapp(host.name)
            uploaded = await _until_stopped(ensure_uploaded(conn, host.name, app, host.upload_dir), stream)
            if uploaded is None:
                ended = await stream.done
                return ended
        command = agent_command(host, uploaded)
        try:
            chan, _session = await conn.create_session(lambda: _AgentSession(stream), command, encoding=None)
        except (asyncssh.Error, OSError) as exc:
            raise AgentError(host.name, f"cannot start the agent ({command}): {exc}") from None
        log.debug("%s: running %s", host.name, command)
        stream.attach_control(chan.write)  # the agent's stdin: delta negotiation (agent/delta.py)
        stream.started()
        ended = await stream.wait(host.effective_read_timeout)
        await _close_channel(chan, stream)
        return ended
    finally:
        for c in reversed(conns):
            c.close()
        for c in reversed(conns):
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(c.wait_closed(), CLOSE_GRACE)


async def _close_channel(chan: asyncssh.SSHClientChannel[bytes], stream: AgentStream) -> None:
    """Graceful on stop (EOF: the agent exits by itself); a hung agent gets SIGKILL where sshd allows."""
    if chan.is_closing():
        return
    if stream.graceful:
        chan.write_eof()
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(chan.wait_closed(), stream.grace)
    elif stream.timed_out:
        with contextlib.suppress(Exception):
            chan.send_signal("KILL")
    chan.close()
