"""FleetTransport: one task per host that keeps its agent stream alive and reports what happens.

Each host loops dial -> stream -> down -> backoff -> dial. Hosts never share fate: a protocol error, a hung
agent or a changed host key ends only that host's stream. Handshakes are CPU-bound, so at most
``max_concurrent_connects`` run at once; the rest queue. A direct host is reached first (TCP connect and the
server's banner, outside the bound), so dead hosts wait on their timers without holding a slot.

Two clocks for trying again (issue 33). A host that was reached and failed after (a handshake refused, an
agent that exits, a connection that ends) backs off exponentially with full jitter, up to ``backoff_cap``:
handshakes cost CPU on both sides, and a fleet that drops together must not come back in one wave. A host
that did not answer at all (:class:`HostUnreachable`: no TCP connection, or no banner: powered off, cut off,
sshd frozen) costs nothing but a socket to try, so it is *probed* on a short period (full jitter under
``probe_cap``, 5 s), and the handshake follows only when the probe answers: a host whose sshd was frozen a
minute is up seconds after it thaws, whatever the backoff had grown to. The connect bound still holds the
handshakes of many hosts that answer at once. Status
reaches the sink on every change: ``connecting`` (first attempt only), ``up`` (a valid hello arrived),
``down`` with a reason (the host stays ``down`` across retries, so alerts do not flap while it is
unreachable), ``maintenance`` while the host is held (:meth:`FleetTransport.hold`: its session is ended, EOF
to the agent, and it is not dialled until :meth:`FleetTransport.release`, which dials at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import resource
import time
from collections.abc import Callable

from gpufleet.agent import wire
from gpufleet.collector.errors import ConfigError, HostUnreachable, TransportError
from gpufleet.collector.fleet.live import FleetSink, HostState, LiveView
from gpufleet.collector.model.views import HostStatus
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.transport.backoff import Backoff
from gpufleet.collector.transport.hostkeys import POLICIES, HostKeyRefused, KnownHostsStore
from gpufleet.collector.transport.local import run_local
from gpufleet.collector.transport.ssh import SshContext, run_ssh
from gpufleet.collector.transport.stream import AgentStream

log = logging.getLogger(__name__)

STOP_REASON = "collector stopping"
#: Seconds: the longest wait between two probes of a host that does not answer (module docstring). A host
#: back from a freeze is probed within this, then dialled.
PROBE_CAP = 5.0
PROBE_BASE = 1.0
RESTART_REASON = "restart requested"
HOLD_REASON = "maintenance"


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a socket per host); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft
    return target


def quiet_asyncssh() -> None:
    """asyncssh logs about ten INFO lines per connection; at 1,000 hosts they bury the transport's own one
    line per change (up, down with reason). Keep its warnings, unless its level was set explicitly or the
    collector runs with debug logging."""
    ssh_log = logging.getLogger("asyncssh")
    if ssh_log.level == logging.NOTSET and not logging.getLogger().isEnabledFor(logging.DEBUG):
        ssh_log.setLevel(logging.WARNING)


def _validate(hosts: list[HostConfig]) -> None:
    seen: set[str] = set()
    for h in hosts:
        if h.name in seen:
            raise ConfigError(f"host {h.name!r} is listed twice", key="hosts")
        seen.add(h.name)
        if h.transport not in ("ssh", "local"):
            raise ConfigError(f"unknown transport {h.transport!r}", key=f"hosts.{h.name}.transport")
        if h.host_key_policy not in POLICIES:
            raise ConfigError(f"host_key_policy must be one of {', '.join(POLICIES)} (host key verification "
                              f"cannot be disabled), got {h.host_key_policy!r}",
                              key=f"hosts.{h.name}.host_key_policy")
        if h.max_line_bytes < 1024:
            raise ConfigError("max_line_bytes must be at least 1024", key=f"hosts.{h.name}.max_line_bytes")


class _Host:
    """Per-host bookkeeping inside the manager."""

    def __init__(self, config: HostConfig, state: HostState, backoff: Backoff, probe: Backoff) -> None:
        self.config = config
        self.state = state
        self.backoff = backoff
        self.probe = probe  # the waits between probes while it does not answer
        self.task: asyncio.Task[None] | None = None
        self.stream: AgentStream | None = None
        self.wake = asyncio.Event()  # restart_host, hold, release: skip the backoff sleep
        self.held: str | None = None  # why the host is held (maintenance): not dialled while set


class FleetTransport:
    """Keeps one agent stream per host and reports into the live view (which owns the hosts' state and passes
    frames on). See the module docstring for the lifecycle."""

    def __init__(self, hosts: list[HostConfig], live: LiveView, *, max_concurrent_connects: int = 32,
                 clock: Callable[[], float] = time.time, backoff_base: float = 1.0, backoff_cap: float = 60.0,
                 stable_after: float = 30.0, rng: random.Random | None = None,
                 probe_cap: float = PROBE_CAP) -> None:
        _validate(hosts)
        self.sink: FleetSink = live
        self.clock = clock
        self._rng = rng or random.Random()
        self._slots = asyncio.Semaphore(max_concurrent_connects)
        self._ssh = SshContext({h.name: h for h in hosts}, self._slots, KnownHostsStore())
        self._hosts: dict[str, _Host] = {}
        for h in hosts:
            state = live.add_host(h.name, h.tags, since=clock())  # the live view owns it; we report into it
            backoff = Backoff(backoff_base, backoff_cap, stable_after=stable_after,
                              rng=random.Random(self._rng.random()))
            probe = Backoff(min(PROBE_BASE, probe_cap), probe_cap, rng=random.Random(self._rng.random()))
            self._hosts[h.name] = _Host(h, state, backoff, probe)
        self._stopping = asyncio.Event()
        self._started = False

    # ---------------------------------------------------------------------------------------- public

    async def start(self) -> None:
        """Start every host's task (returns at once; hosts come up in the background)."""
        if self._started:
            return
        self._started = True
        quiet_asyncssh()
        limit = raise_fd_limit()
        if limit < 2 * len(self._hosts) + 64:
            log.warning("open-file limit %d is low for %d hosts", limit, len(self._hosts))
        for host in self._hosts.values():
            if host.held is None:  # a held host's state was reported when it was held
                self._emit(host)
            host.task = asyncio.create_task(self._run(host), name=f"gpufleet-host-{host.config.name}")

    async def stop(self, timeout: float = 5.0) -> None:
        """Close every connection: agents get EOF and exit. Returns within about ``timeout`` seconds."""
        self._stopping.set()
        for host in self._hosts.values():
            host.wake.set()
            if host.stream is not None:
                host.stream.request_stop(STOP_REASON, grace=timeout / 2)
        tasks = [h.task for h in self._hosts.values() if h.task is not None]
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    def states(self) -> dict[str, HostState]:
        """The live state of every host (the objects themselves: copy them to keep a snapshot)."""
        return {name: host.state for name, host in self._hosts.items()}

    async def restart_host(self, name: str) -> None:
        """Drop the host's current stream (if any) and dial again now, without waiting for the backoff."""
        host = self._hosts.get(name)
        if host is None:
            raise KeyError(name)
        host.backoff.reset()
        host.wake.set()
        if host.stream is not None:
            host.stream.request_stop(RESTART_REASON)

    def hold(self, name: str, why: str) -> None:
        """Let go of the host (maintenance): end its session gracefully (EOF: the agent exits and releases
        the GPUs' device files), show it as ``maintenance`` with ``why``, and dial it no more until
        :meth:`release`. Works before :meth:`start` too (a restarted collector never dials a held host)."""
        host = self._hosts.get(name)
        if host is None:
            raise KeyError(name)
        host.held = why
        host.wake.set()
        if host.stream is not None:
            host.stream.request_stop(HOLD_REASON)
        self._set(host, "maintenance", why)

    def release(self, name: str) -> None:
        """End the hold: dial the host now (no backoff left over from before the hold)."""
        host = self._hosts.get(name)
        if host is None:
            raise KeyError(name)
        if host.held is None:
            return
        host.held = None
        host.backoff.reset()
        self._set(host, "connecting", None)
        host.wake.set()

    # ---------------------------------------------------------------------------------------- per host

    async def _run(self, host: _Host) -> None:
        first = True
        last_reason: str | None = None
        while not self._stopping.is_set():
            if host.held is not None:
                await self._held(host)
                continue
            if not first:
                host.state.reconnects += 1
            first = False
            host.wake.clear()
            reason, slow, up_for, unreachable = await self._attempt(host)
            if reason == HOLD_REASON or host.held is not None:
                continue  # we let go of it on purpose: not an observation of the host
            self._down(host, reason)
            if self._stopping.is_set():
                break
            host.backoff.connection_ended(up_for)
            if up_for is not None:
                last_reason = None  # it was up in between: the next down is news again
            if reason == RESTART_REASON:
                continue
            if unreachable:
                delay = host.probe.next()  # it cost nothing: ask again soon (module docstring)
            else:
                host.probe.reset()
                delay = host.backoff.slow() if slow else host.backoff.next()
            # one line per new reason: a host that stays unreachable does not flood the log
            log.log(logging.INFO if reason != last_reason else logging.DEBUG,
                    "%s: down (%s); next attempt in %.1f s", host.config.name, reason, delay)
            last_reason = reason
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(host.wake.wait(), delay)

    async def _held(self, host: _Host) -> None:
        """Wait while the host is held (or until the collector stops)."""
        while host.held is not None and not self._stopping.is_set():
            host.wake.clear()
            await host.wake.wait()

    async def _attempt(self, host: _Host) -> tuple[str, bool, float | None, bool]:
        """One session. Returns (reason it ended, retry slowly?, seconds it was up or None, whether the host
        did not answer at all)."""
        cfg = host.config
        up_at: list[float] = []
        loop = asyncio.get_running_loop()

        def on_up(hello: wire.Hello) -> None:
            up_at.append(loop.time())
            host.state.connects += 1
            self._set(host, "up", None)
            log.info("%s: up (agent %s, driver %s)", cfg.name, hello.agent_version, hello.driver_version)

        stream = AgentStream(host.state, self.sink, max_line_bytes=cfg.max_line_bytes, clock=self.clock,
                             on_up=on_up, max_clock_skew=cfg.max_clock_skew, budget=cfg.budget)
        host.stream = stream
        if self._stopping.is_set():
            stream.request_stop(STOP_REASON)
        slow = unreachable = False
        try:
            if cfg.transport == "local":
                reason = await run_local(cfg, stream)
            else:
                reason = await run_ssh(cfg, stream, self._ssh)
        except HostUnreachable as exc:
            reason, unreachable = str(exc).removeprefix(f"{cfg.name}: "), True
        except HostKeyRefused as exc:
            reason, slow = exc.reason, True
        except ConfigError as exc:
            reason, slow = f"config error: {exc}", True
        except TransportError as exc:
            reason = str(exc).removeprefix(f"{cfg.name}: ")
        except Exception as exc:  # noqa: BLE001 - one host's surprise must not end its task
            log.exception("%s: unexpected transport failure", cfg.name)
            reason = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            host.stream = None
        up_for = loop.time() - up_at[0] if up_at else None
        return reason, slow, up_for, unreachable

    # ---------------------------------------------------------------------------------------- state

    def _down(self, host: _Host, reason: str) -> None:
        self._set(host, "down", reason)

    def _set(self, host: _Host, status: HostStatus, reason: str | None) -> None:
        if host.held is not None and status != "maintenance":
            return  # a session that ends (or a hello that lands) after the hold does not undo it
        state = host.state
        if state.status == status and state.reason == reason:
            return
        if state.status != status:
            state.since = self.clock()
        state.status = status
        state.reason = reason
        if self._stopping.is_set():
            return  # our own hang-up is not an observation of the host: no sink records it
        self._emit(host)

    def _emit(self, host: _Host) -> None:
        try:
            self.sink.host_state(host.state)
        except Exception:  # noqa: BLE001 - the sink must never break the transport
            log.exception("%s: sink failed on host_state", host.config.name)
