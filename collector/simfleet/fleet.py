"""A simulated GPU fleet behind real SSH on 127.0.0.1, for tests, ``gpufleet demo`` and the benchmark.

Each virtual host is reached over a real asyncssh server with generated host keys and one authorized
client key; the SSH username names the virtual host, so one server can stand for many hosts (cheap at
1,000) and per-host servers can be cut, restored and re-keyed one at a time (failure tests). The server
behaves like a host with ``gpufleet-agent`` installed: it runs the requested command's arguments with the
real agent (``sys.executable -m gpufleet.agent``, fake backend) as a subprocess, or — in ``inproc`` mode —
writes frames itself, so a benchmark needs no process per host. ``exec_commands=True`` runs commands with
``/bin/sh`` in a per-host home directory, which together with the SFTP server makes ``agent: upload`` work.

Run ``python -m gpufleet.collector.simfleet --hosts 1000 --mode inproc --shared`` to serve a fleet from
another process; it prints the host configs as JSON (``--config FILE`` also writes a gpufleet.yaml for
``gpufleet collector run -c FILE``) and serves until SIGTERM, or until EOF when stdin is a pipe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from gpufleet.agent import delta
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.simfleet.frames import FrameGenerator
from gpufleet.collector.transport.hostkeys import host_pattern
from gpufleet.collector.transport.local import signal_name
from gpufleet.collector.transport.sshlib import asyncssh

log = logging.getLogger(__name__)

Mode = Literal["subprocess", "inproc"]
SCENARIOS: tuple[str, ...] = ("busy", "wasting", "hot", "zombie", "lost", "idle", "input_bound",
                              "ddp_idle_peers", "near_oom", "underused")
AGENT_NAME = "gpufleet-agent"
LOOPBACK = "127.0.0.1"
#: A shared server takes the whole fleet's TCP connects at once (the collector connects before it takes a
#: connect slot): asyncssh's default backlog of 100 would drop SYNs and add 1 s retransmits. The kernel caps
#: it at net.core.somaxconn.
LISTEN_BACKLOG = 4096


@dataclasses.dataclass(eq=False)
class SimSession:
    """One agent session on a virtual host."""

    host: SimHost
    process: asyncssh.SSHServerProcess[bytes]
    agent: asyncio.subprocess.Process | None = None
    paused: bool = False
    killed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def write(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self.process.stdout.write(data)


@dataclasses.dataclass(eq=False)
class SimHost:
    name: str
    scenario: str
    port: int = 0
    host_key: asyncssh.SSHKey | None = None
    listener: _Listener | None = None
    sessions: set[SimSession] = dataclasses.field(default_factory=set)
    home: Path = Path()
    sessions_started: int = 0
    session_times: list[float] = dataclasses.field(default_factory=list)  # monotonic start of each session


class _Handshakes:
    """How many SSH handshakes (the client's first byte -> auth done) are in flight on the fleet's servers,
    and the most seen at once: the collector's connect bound, observed from the other end. The clock starts
    at the client's version line, not at accept: the collector connects TCP before it takes a slot.
    ``accepted`` counts TCP connections accepted."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.accepted = 0

    def begin(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def end(self) -> None:
        self.now -= 1


class _Listener:
    """One asyncssh server socket and the connections it accepted."""

    def __init__(self, fleet: SimFleet, hosts: dict[str, SimHost], key: asyncssh.SSHKey) -> None:
        self.fleet = fleet
        self.hosts = hosts
        self.key = key
        self.acceptor: asyncssh.SSHAcceptor | None = None
        self.conns: set[asyncssh.SSHServerConnection] = set()
        self.port = 0

    async def listen(self, port: int) -> int:
        listener = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self.conn = conn
                self.handshaking = False
                listener.conns.add(conn)
                listener.fleet.handshakes.accepted += 1
                received = conn.data_received

                def first_data(data: bytes, datatype: asyncssh.DataType = None) -> None:
                    # the handshake starts when the client speaks; then get out of the way
                    setattr(conn, "data_received", received)  # noqa: B010 - an instance override
                    self.handshaking = True
                    listener.fleet.handshakes.begin()
                    received(data, datatype)

                setattr(conn, "data_received", first_data)  # noqa: B010 - mypy refuses method assignment
                _like_openssh(conn)

            def auth_completed(self) -> None:
                self._handshake_over()

            def connection_lost(self, exc: Exception | None) -> None:
                listener.conns.discard(self.conn)
                self._handshake_over()

            def _handshake_over(self) -> None:
                if self.handshaking:
                    self.handshaking = False
                    listener.fleet.handshakes.end()

            def begin_auth(self, username: str) -> bool:
                return True

            def public_key_auth_supported(self) -> bool:
                return True

            def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
                return username in listener.hosts and key == listener.fleet.client_public_key

            def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                                     orig_port: int) -> bool:
                # jump host support, loopback only
                return dest_host in (LOOPBACK, "localhost", "::1")

        def sftp_factory(chan: asyncssh.SSHServerChannel[bytes]) -> asyncssh.SFTPServer:
            user = chan.get_extra_info("username")
            home = self.hosts[user].home
            return asyncssh.SFTPServer(chan, chroot=str(home).encode())

        self.acceptor = await asyncssh.listen(
            LOOPBACK, port, server_host_keys=[self.key], server_factory=Server,
            process_factory=self.fleet._session, sftp_factory=sftp_factory, encoding=None,
            allow_scp=False, keepalive_interval=0, login_timeout=30, reuse_address=True,
            backlog=LISTEN_BACKLOG)
        self.port = self.acceptor.get_port()
        return self.port

    async def close(self) -> None:
        if self.acceptor is not None:
            self.acceptor.close()
            with contextlib.suppress(Exception):
                await self.acceptor.wait_closed()
            self.acceptor = None
        for conn in list(self.conns):
            conn.abort()
        self.conns.clear()


def _like_openssh(conn: asyncssh.SSHServerConnection) -> None:
    """Send packets as OpenSSH's sshd does. asyncssh puts an empty SSH_MSG_IGNORE before every packet it
    encrypts (a countermeasure from the CBC days, kept for every cipher); OpenSSH's sshd sends none on an
    exec channel, so against the simulator the collector would decrypt twice the packets a real host sends
    (issue 33: the capacity benches measure the collector). Checked against /usr/sbin/sshd: data packets
    only."""
    send = conn.send_packet

    def send_packet(pkttype: int, *args: bytes, handler: Any = None) -> None:
        if pkttype == _MSG_IGNORE and args == (_EMPTY_STRING,):
            return
        send(pkttype, *args, handler=handler)

    setattr(conn, "send_packet", send_packet)  # noqa: B010 - an instance override, as data_received above


_MSG_IGNORE = 2  # RFC 4253
_EMPTY_STRING = b"\0\0\0\0"  # an SSH string of no bytes, what asyncssh sends in its IGNORE packets


def _names(hosts: int | Sequence[str] | Mapping[str, str], scenario: str) -> dict[str, str]:
    if isinstance(hosts, int):
        width = max(3, len(str(hosts)))
        return {f"sim-{i:0{width}d}": scenario for i in range(1, hosts + 1)}
    if isinstance(hosts, Mapping):
        return dict(hosts)
    return {name: scenario for name in hosts}


class SimFleet:
    """``async with SimFleet(3) as fleet: fleet.host_configs()``; see the module docstring."""

    def __init__(self, hosts: int | Sequence[str] | Mapping[str, str] = 3, *, mode: Mode = "subprocess",
                 interval: float = 1.0, scenario: str = "busy", shared_server: bool = False,
                 workdir: str | Path | None = None, agent_argv: Sequence[str] | None = None,
                 exec_commands: bool = False, gpus: int = 4, claimed_hostname: str | None = None,
                 procs: int = 1, deltas: bool = True) -> None:
        self.mode = mode
        self.deltas = deltas  # in-process hosts offer 1.3 deltas (False: they speak 1.2, full frames)
        self.procs = procs  # processes per GPU in the in-process frames (a realistic host has several)
        self.interval = interval
        self.shared_server = shared_server
        self.exec_commands = exec_commands
        self.gpus = gpus
        self.claimed_hostname = claimed_hostname
        self.agent_argv = list(agent_argv) if agent_argv else [sys.executable, "-m", "gpufleet.agent"]
        self.hosts: dict[str, SimHost] = {n: SimHost(n, s) for n, s in _names(hosts, scenario).items()}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._workdir = Path(workdir) if workdir else None
        self.dir = Path()
        self.client_key_path = Path()
        self.known_hosts_path = Path()
        self.client_public_key: asyncssh.SSHKey | None = None
        self._listeners: list[_Listener] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.handshakes = _Handshakes()

    # ---------------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> SimFleet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gpufleet-sim-")
            self.dir = Path(self._tmp.name)
        else:
            self.dir = self._workdir
            self.dir.mkdir(parents=True, exist_ok=True)
        client = asyncssh.generate_private_key("ssh-ed25519", comment="gpufleet-sim-collector")
        self.client_key_path = self.dir / "client_key"
        client.write_private_key(str(self.client_key_path))
        client.write_public_key(str(self.client_key_path) + ".pub")
        os.chmod(self.client_key_path, 0o600)
        self.client_public_key = client.convert_to_public()
        for host in self.hosts.values():
            host.home = self.dir / "homes" / host.name
            host.home.mkdir(parents=True, exist_ok=True)
        if self.shared_server:
            key = asyncssh.generate_private_key("ssh-ed25519")
            lst = _Listener(self, self.hosts, key)
            port = await lst.listen(0)
            self._listeners.append(lst)
            for host in self.hosts.values():
                host.port, host.host_key, host.listener = port, key, lst
        else:
            for host in self.hosts.values():
                await self._listen(host, 0, asyncssh.generate_private_key("ssh-ed25519"))
        self.known_hosts_path = self.dir / "known_hosts"
        self.write_known_hosts()

    async def stop(self) -> None:
        for lst in self._listeners:
            await lst.close()
        self._listeners.clear()
        for host in self.hosts.values():
            for sess in list(host.sessions):
                _kill(sess)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def _listen(self, host: SimHost, port: int, key: asyncssh.SSHKey) -> None:
        lst = _Listener(self, {host.name: host}, key)
        host.port = await lst.listen(port)
        host.host_key, host.listener = key, lst
        self._listeners.append(lst)

    def write_known_hosts(self, path: Path | None = None) -> Path:
        """known_hosts lines for every virtual host's *current* key (the fleet writes it once at start)."""
        target = path or self.known_hosts_path
        entries: dict[str, None] = {}  # a shared server's one key is one line
        for host in self.hosts.values():
            assert host.host_key is not None
            alg, blob = host.host_key.export_public_key().decode().split()[:2]
            entries[f"{host_pattern(LOOPBACK, host.port)} {alg} {blob}"] = None
        target.write_text("\n".join(entries) + "\n")
        return target

    def host_configs(self, **overrides: Any) -> list[HostConfig]:
        """HostConfigs for the collector (strict host keys, the fleet's key); ``overrides`` apply to all."""
        out = []
        for host in self.hosts.values():
            cfg = HostConfig(name=host.name, address=LOOPBACK, port=host.port, user=host.name,
                             key=str(self.client_key_path), known_hosts=str(self.known_hosts_path),
                             host_key_policy="strict", interval=self.interval,
                             agent_args=["--fake", host.scenario], connect_timeout=10.0,
                             keepalive_interval=5.0, keepalive_count_max=3)
            out.append(dataclasses.replace(cfg, **overrides))
        return out

    # ---------------------------------------------------------------------------------------- faults

    def _host(self, name: str) -> SimHost:
        try:
            return self.hosts[name]
        except KeyError:
            raise KeyError(f"no simulated host {name!r}") from None

    def sessions(self, name: str) -> list[SimSession]:
        return list(self._host(name).sessions)

    def agent_pids(self, name: str) -> list[int]:
        return [s.agent.pid for s in self._host(name).sessions if s.agent is not None]

    def kill_agent(self, name: str) -> int:
        """SIGKILL the host's agents (as if the OOM killer struck); returns how many."""
        n = 0
        for sess in self.sessions(name):
            _kill(sess)
            n += 1
        return n

    def pause_agent(self, name: str, paused: bool = True) -> int:
        """SIGSTOP (or SIGCONT) the host's agents: the connection stays, frames stop."""
        n = 0
        for sess in self.sessions(name):
            sess.paused = paused
            if sess.agent is not None:
                _killpg(sess.agent, signal.SIGSTOP if paused else signal.SIGCONT)
            n += 1
        return n

    def inject(self, name: str, data: bytes) -> int:
        """Write raw bytes into the host's agent streams (garbage, oversized lines, foreign versions)."""
        n = 0
        for sess in self.sessions(name):
            sess.write(data)
            n += 1
        return n

    async def cut(self, name: str) -> None:
        """The host vanishes from the network: listener closed, its connections aborted."""
        host = self._host(name)
        if self.shared_server:
            raise RuntimeError("cut() needs per-host servers (shared_server=False)")
        if host.listener is not None:
            await host.listener.close()
            self._listeners.remove(host.listener)
            host.listener = None
        for sess in list(host.sessions):
            _kill(sess)

    def drop(self, names: Sequence[str] | None = None) -> int:
        """A network blip: abort the SSH connections of ``names`` (default: every host) but keep listening,
        so the collector can reconnect at once. Works with a shared server too. Returns how many dropped."""
        wanted = set(self.hosts if names is None else names)
        for name in wanted:
            self._host(name)
        n = 0
        for lst in self._listeners:
            for conn in list(lst.conns):
                if conn.get_extra_info("username") in wanted:
                    conn.abort()
                    n += 1
        for name in wanted:
            for sess in list(self.hosts[name].sessions):
                _kill(sess)
        return n

    async def restore(self, name: str) -> None:
        """The host comes back on the same port with the same host key."""
        host = self._host(name)
        if host.listener is None:
            assert host.host_key is not None
            await self._listen(host, host.port, host.host_key)

    async def rekey(self, name: str) -> asyncssh.SSHKey:
        """The host is reinstalled: a new host key on the same port (known_hosts keeps the old one)."""
        await self.cut(name)
        key = asyncssh.generate_private_key("ssh-ed25519")
        await self._listen(self._host(name), self._host(name).port, key)
        return key

    # ---------------------------------------------------------------------------------------- sessions

    async def _session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        user = process.get_extra_info("username")
        host = self.hosts[user]
        sess = SimSession(host, process)
        host.sessions.add(sess)
        host.sessions_started += 1
        host.session_times.append(time.monotonic())
        try:
            command = process.command or ""
            if self.exec_commands:
                await self._run_agent(sess, ["/bin/sh", "-c", command], cwd=host.home)
                return
            argv = shlex.split(command)
            if not argv or os.path.basename(argv[0]) != AGENT_NAME:
                process.stderr.write(f"sh: 1: {argv[0] if argv else ''}: not found\n".encode())
                process.exit(127)
                return
            if self.mode == "inproc":
                await self._generate(sess, _interval(argv[1:], self.interval))
            else:
                await self._run_agent(sess, [*self.agent_argv, *argv[1:]], cwd=None)
        except Exception:  # noqa: BLE001 - a broken session must not take the server down
            log.exception("%s: simulated session failed", host.name)
            with contextlib.suppress(Exception):
                process.exit(255)
        finally:
            host.sessions.discard(sess)
            if task is not None:
                self._tasks.discard(task)

    async def _run_agent(self, sess: SimSession, argv: list[str], cwd: Path | None) -> None:
        process = sess.process
        env = dict(os.environ)
        if cwd is not None:
            env["HOME"] = str(cwd)
        agent = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
        sess.agent = agent
        assert agent.stdout is not None and agent.stderr is not None and agent.stdin is not None

        async def pump(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
            while chunk := await src.read(65536):
                with contextlib.suppress(Exception):
                    dst.write(chunk)

        async def watch_stdin() -> None:
            # the collector's control lines (agent/delta.py), a signal, then EOF: forward them to the agent
            assert agent.stdin is not None
            while True:
                try:
                    data = await process.stdin.read(65536)
                except asyncssh.SignalReceived as exc:
                    _signal(agent, exc.signal)
                    continue
                except Exception:  # noqa: BLE001 - channel gone
                    data = b""
                if not data:
                    break
                with contextlib.suppress(Exception):  # an agent that exited: its pipe is gone
                    agent.stdin.write(data)
            agent.stdin.close()
            # a stopped agent never reads EOF: like a host whose sshd session ended, reap it
            await asyncio.sleep(2.0)
            _killpg(agent, signal.SIGKILL)

        pumps = [asyncio.create_task(pump(agent.stdout, process.stdout)),
                 asyncio.create_task(pump(agent.stderr, process.stderr))]
        watcher = asyncio.create_task(watch_stdin())
        try:
            code = await agent.wait()
            await asyncio.wait(pumps, timeout=2.0)
        finally:
            watcher.cancel()
            for p in pumps:
                p.cancel()
            _killpg(agent, signal.SIGKILL)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(agent.wait())
        with contextlib.suppress(Exception):
            if code < 0:
                process.exit_with_signal(signal_name(-code))
            else:
                process.exit(code)

    async def _generate(self, sess: SimSession, interval: float) -> None:
        """In-process agent: hello, then one frame per interval, until EOF or a simulated kill. Like the real
        agent (agent/delta.py) it sends full snapshots until the collector's accept on stdin, then a
        keyframe and deltas (a keyframe again when the collector asks for a resync)."""
        process = sess.process
        host = sess.host
        gen = FrameGenerator(host.name, self.gpus, self.claimed_hostname, procs=self.procs,
                             deltas=self.deltas)
        sess.write(gen.hello())
        mode = {"deltas": False, "key": True}

        async def ticker() -> None:
            seq = 0
            next_at = time.monotonic()
            while True:
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if not sess.paused:
                    seq += 1
                    if not mode["deltas"]:
                        sess.write(gen.snapshot(seq))
                    elif mode["key"]:
                        mode["key"] = False
                        sess.write(gen.keyframe(seq))
                    else:
                        sess.write(gen.delta(seq))

        async def eof() -> None:
            pending = b""
            while True:
                try:
                    data = await process.stdin.read(65536)
                except asyncssh.SignalReceived:
                    sess.killed.set()
                    return
                except Exception:  # noqa: BLE001
                    return
                if not data:
                    return
                *lines, pending = (pending + data).split(b"\n")
                if len(pending) > delta.CONTROL_MAX:
                    pending = b""
                for line in lines:
                    kind = delta.parse_control(line)
                    if kind == "accept" and self.deltas:
                        mode["deltas"] = mode["key"] = True
                    elif kind == "resync":
                        mode["key"] = True

        tasks = [asyncio.create_task(ticker()), asyncio.create_task(eof()),
                 asyncio.create_task(sess.killed.wait())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
        with contextlib.suppress(Exception):
            if sess.killed.is_set():
                process.exit_with_signal("KILL")
            else:
                process.exit(0)


def _interval(args: list[str], default: float) -> float:
    for i, arg in enumerate(args):
        if arg == "--interval" and i + 1 < len(args):
            with contextlib.suppress(ValueError):
                return float(args[i + 1])
        if arg.startswith("--interval="):
            with contextlib.suppress(ValueError):
                return float(arg.split("=", 1)[1])
    return default


def _signal(agent: asyncio.subprocess.Process, name: str) -> None:
    try:
        sig = signal.Signals[f"SIG{name}"]
    except KeyError:
        return
    if sig != signal.SIGKILL:
        _killpg(agent, signal.SIGCONT)
    _killpg(agent, sig)


def _killpg(agent: asyncio.subprocess.Process, sig: int) -> None:
    """Signal the agent's whole process group (in exec mode the agent is a child of /bin/sh)."""
    if agent.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(agent.pid, sig)


def _kill(sess: SimSession) -> None:
    if sess.agent is not None:
        _killpg(sess.agent, signal.SIGKILL)
    sess.killed.set()


# -------------------------------------------------------------------------------------------- serve


def collector_yaml(fleet: SimFleet, path: Path) -> Path:
    """Write a gpufleet.yaml for ``fleet`` (absolute paths; history and query socket in the fleet's dir).

    What an operator needs to try ``gpufleet collector run -c FILE`` and ``gpufleet -c FILE hosts`` against
    a simulated fleet served by another process.
    """
    import yaml

    configs = fleet.host_configs()
    doc: dict[str, Any] = {
        "defaults": {"key": str(fleet.client_key_path), "known_hosts": str(fleet.known_hosts_path),
                     "host_key_policy": "strict", "interval": fleet.interval},
        "hosts": [{"name": c.name, "address": c.address, "port": c.port, "user": c.user,
                   "agent_args": list(c.agent_args)} for c in configs],
        "storage": {"path": str(fleet.dir / "fleet.db")},
        "api": {"socket": str(fleet.dir / "api.sock")},
    }
    header = (f"# gpufleet.yaml for a simulated fleet of {len(configs)} hosts served by "
              f"`python -m gpufleet.collector.simfleet` (pid {os.getpid()}).\n"
              f"# Its ports and keys change every time the simulator starts: write this file again then.\n")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return path


async def _serve(args: argparse.Namespace) -> None:
    fleet = SimFleet(args.hosts, mode=args.mode, interval=args.interval, scenario=args.scenario,
                     shared_server=args.shared, workdir=args.dir, gpus=args.gpus, procs=args.procs,
                     deltas=args.proto != "1.2")
    async with fleet:
        configs = [dataclasses.asdict(c) for c in fleet.host_configs()]
        written = collector_yaml(fleet, Path(args.config).resolve()) if args.config else None
        sys.stdout.write(json.dumps({"hosts": configs, "dir": str(fleet.dir),
                                     "config": str(written) if written else None}) + "\n")
        sys.stdout.flush()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        if _stdin_is_pipe():
            # the parent (a test, the benchmark) holds our stdin: its EOF means "stop"
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            waits.append(asyncio.create_task(reader.read()))
        print(f"serving {len(fleet.hosts)} simulated hosts from {fleet.dir}"
              + (f"; collector config: {written}" if written else "")
              + ("; stops at EOF on stdin or SIGTERM" if len(waits) > 1 else "; stops on SIGTERM / Ctrl-C"),
              file=sys.stderr, flush=True)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()


def _stdin_is_pipe() -> bool:
    """A pipe or socket on stdin is a parent's lifeline; a terminal or /dev/null (``&`` in scripts) is not."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a simulated fleet; prints ``{"hosts": [HostConfig as dict, ...]}`` on one line."""
    p = argparse.ArgumentParser(prog="python -m gpufleet.collector.simfleet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=3)
    p.add_argument("--mode", choices=["subprocess", "inproc"], default="subprocess")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--scenario", default="busy", help=f"fake backend scenario ({', '.join(SCENARIOS)})")
    p.add_argument("--shared", action="store_true", help="one server for all hosts (by username)")
    p.add_argument("--dir", default=None, help="where keys and known_hosts go (default: a temp dir)")
    p.add_argument("--gpus", type=int, default=4, help="GPUs per host (inproc mode)")
    p.add_argument("--procs", type=int, default=1, help="processes per GPU (inproc mode)")
    p.add_argument("--proto", choices=["1.2", "1.3"], default="1.3",
                   help="what in-process hosts speak: 1.3 offers deltas, 1.2 sends full frames only")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="also write a gpufleet.yaml for this fleet (for `gpufleet collector run -c FILE`)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
