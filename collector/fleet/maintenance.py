"""Host maintenance windows: the collector lets go of a host for a while, so its GPUs are free.

The agent holds /dev/nvidia* while it runs, so ``nvidia-smi -r``, MIG mode changes and driver upgrades fail
with "in use by another client", and a collector that redials at once gives the device no chance. A window
(``gpufleet maintenance start --host n3 --for 1h --comment ...``):

- ends the host's agent session (the transport closes the channel: EOF on the agent's stdin, it exits) and
  dials the host no more until the window ends (:meth:`FleetTransport.hold` / ``release``);
- shows the host as ``maintenance`` (who, why, until when) in every view, and host_down is not evaluated
  for it (collector/rules/hosts.py);
- mutes the host's alerts, those already firing included, with an ordinary silence ``host=<name>`` for the
  window (collector/alerts/silences.py): they are listed as muted, not lost, and an alert that was sent
  before still gets its resolution once the host is watched again;
- is kept in the store, so a restarted collector holds the host again before it dials anything;
- ends with ``maintenance stop`` or at its end time, and the host is dialled at once (no backoff).

Every start, replacement and end is one ``maintenance:`` line in the collector's log (the audit trail),
and the windows stay in the store after they end (``maintenance list --all``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from gpufleet.collector.errors import QueryError
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.model import names
from gpufleet.collector.model.views import MaintenanceRecord
from gpufleet.collector.units import fmt_duration

if TYPE_CHECKING:  # the CLI imports this module for its bounds: it must not load the store package
    from gpufleet.collector.model.records import SilenceRecord

log = logging.getLogger(__name__)

#: ``--for`` when none is given: a driver reload or a MIG change takes minutes, an upgrade with a reboot less
#: than an hour (Alertmanager's silences default to 1 h too)
DEFAULT_WINDOW = 3600.0
#: The longest window: a host away for longer is being decommissioned or repaired; take it out of the
#: config instead, so it is not forgotten unmonitored.
MAX_WINDOW = 7 * 86400.0
MAX_WINDOW_TEXT = "7 days"
MAX_COMMENT = 300  # characters; a comment is a reason, not a runbook
#: the longest the expiry task sleeps, so a wall clock that is stepped (NTP) cannot postpone an end for long
EXPIRY_CHECK = 30.0


class WindowStore(Protocol):
    """The part of gpufleet.collector.store.Store maintenance uses."""

    async def add_maintenance(self, rec: MaintenanceRecord) -> int: ...
    async def list_maintenance(self, *, include_ended: bool = False,
                               now: float | None = None) -> list[MaintenanceRecord]: ...
    async def end_maintenance(self, window_id: int, now: float) -> bool: ...


class Muter(Protocol):
    """The part of the alert engine maintenance uses: its silences."""

    async def add_silence(self, matchers: dict[str, str], duration: float, comment: str = "",
                          created_by: str = "") -> SilenceRecord: ...
    async def expire_silence(self, silence_id: int) -> bool: ...


class Holder(Protocol):
    """The part of the transport maintenance uses (gpufleet.collector.transport.manager.FleetTransport)."""

    def hold(self, name: str, why: str) -> None: ...
    def release(self, name: str) -> None: ...


def check_window(seconds: float) -> float:
    """A window's length in seconds, or :class:`QueryError` saying the bounds."""
    if not seconds > 0:
        raise QueryError(f"bad argument 'duration': expected a positive number of seconds, got {seconds:g}")
    if seconds > MAX_WINDOW:
        raise QueryError(f"bad argument 'duration': maintenance lasts at most {MAX_WINDOW_TEXT} "
                         f"(got {fmt_duration(seconds)}); take a host that is away longer out of the config")
    return seconds


def check_comment(text: str | None) -> str:
    """The comment on one line, bounded; a window needs one (why the host is away, like a Slurm drain)."""
    one_line = " ".join((text or "").split())
    if not one_line:
        raise QueryError("maintenance needs a comment saying why (--comment \"driver upgrade\")")
    if len(one_line) > MAX_COMMENT:
        raise QueryError(f"bad argument 'comment': at most {MAX_COMMENT} characters")
    return one_line


def describe(rec: MaintenanceRecord) -> str:
    """The host's status reason while in maintenance (stored with the host: the fallback shows it too)."""
    return f"{rec.comment} (by {rec.created_by})"


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Maintenance:
    """The windows in force on one collector, kept in step with the store, the transport and the silences."""

    def __init__(self, store: WindowStore, live: LiveView, muter: Muter, hosts: Iterable[str], *,
                 shard: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.live = live
        self.muter = muter
        self.hosts = list(hosts)  # the hosts this collector watches (its shard's)
        #: one shard of several: ``--host a,b`` may name hosts of other shards, which are theirs to change
        self.shard = shard
        self.clock = clock
        self.windows: dict[str, MaintenanceRecord] = {}  # host -> the window in force
        self._holder: Holder | None = None
        self._lock = asyncio.Lock()  # one change at a time: start, stop and expiry never interleave
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    async def load(self) -> int:
        """The windows still in force from the store (after a restart), for the hosts watched here."""
        now = self.clock()
        watched = set(self.hosts)
        for rec in await self.store.list_maintenance(include_ended=False, now=now):
            if rec.host in watched:
                self.windows[rec.host] = rec  # a later window of the same host replaces an earlier one
                self.live.set_maintenance(rec.host, rec)
        if self.windows:
            log.info("maintenance: %d hosts still in maintenance: %s", len(self.windows),
                     ", ".join(f"{h} until {_utc(r.ends_at)}" for h, r in sorted(self.windows.items())))
        return len(self.windows)

    def attach(self, holder: Holder) -> None:
        """Hold the hosts in maintenance on ``holder`` (before it starts: they are never dialled)."""
        self._holder = holder
        for rec in self.windows.values():
            holder.hold(rec.host, describe(rec))

    def start(self) -> None:
        """Start the task that ends windows at their end time."""
        if self._task is None:
            self._task = asyncio.create_task(self._expire_loop(), name="maintenance-windows")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    # ------------------------------------------------------------------------------------ queries

    def active(self) -> list[MaintenanceRecord]:
        return sorted(self.windows.values(), key=lambda r: (r.starts_at, r.host))

    async def listing(self, include_ended: bool = False) -> list[MaintenanceRecord]:
        if not include_ended:
            return self.active()
        watched = set(self.hosts)
        rows = await self.store.list_maintenance(include_ended=True, now=self.clock())
        return [r for r in rows if r.host in watched]

    def resolve(self, patterns: Sequence[str]) -> list[str]:
        """The watched hosts ``patterns`` name (names or shell globs); :class:`QueryError` for a name not
        watched here (on a shard: only when none of the names is; the others are other shards') or a glob
        that matches none (the CLI shows such a refusal only when no collector answered)."""
        if not patterns:
            raise QueryError("missing argument 'host'")
        chosen = [h for h in self.hosts if names.matches_any(h, patterns)]
        if not self.shard or not chosen:
            names.check_hosts(patterns, self.hosts)
        if not chosen:
            raise QueryError(f"no host matches {', '.join(repr(p) for p in patterns)}")
        return chosen

    # ------------------------------------------------------------------------------------ changes

    async def begin(self, patterns: Sequence[str], duration: float, comment: str,
                    who: str) -> list[MaintenanceRecord]:
        """Start (or replace) a window on every host ``patterns`` name."""
        duration, comment = check_window(duration), check_comment(comment)
        hosts = self.resolve(patterns)
        out = []
        async with self._lock:
            for host in hosts:
                out.append(await self._begin(host, duration, comment, who))
        self._changed.set()
        return out

    async def _begin(self, host: str, duration: float, comment: str, who: str) -> MaintenanceRecord:
        now = self.clock()
        silence = await self.muter.add_silence({"host": host}, duration, comment=f"maintenance: {comment}",
                                               created_by=who)
        rec = MaintenanceRecord(host=host, starts_at=now, ends_at=now + duration, created_by=who,
                                comment=comment, silence_id=silence.id)
        try:
            rec.id = await self.store.add_maintenance(rec)
        except Exception as exc:
            if silence.id is not None:
                with contextlib.suppress(Exception):
                    await self.muter.expire_silence(silence.id)
            raise QueryError(f"{host}: cannot record the maintenance window: {exc}") from None
        old = self.windows.get(host)
        if old is not None:  # replaced (made longer or shorter): the old window and its silence end now
            await self._close(old, now)
        self.windows[host] = rec
        self.live.set_maintenance(host, rec)
        if self._holder is not None:
            self._holder.hold(host, describe(rec))
        log.info("maintenance: %s %s by %s for %s, until %s (silence %s): %s", host,
                 "window replaced" if old is not None else "started", who, fmt_duration(duration),
                 _utc(rec.ends_at), silence.id, comment)
        return rec

    async def end(self, patterns: Sequence[str], who: str) -> list[MaintenanceRecord]:
        """End the windows of the hosts ``patterns`` name; the hosts are dialled at once."""
        hosts = self.resolve(patterns)
        async with self._lock:
            held = [h for h in hosts if h in self.windows]
            if not held:
                raise QueryError(f"{hosts[0]} is not in maintenance" if len(hosts) == 1 else
                                 f"none of the {len(hosts)} hosts {', '.join(patterns)} names is in "
                                 "maintenance")
            out = [await self._finish(h, f"ended by {who}") for h in held]
        self._changed.set()
        return out

    async def _finish(self, host: str, how: str) -> MaintenanceRecord:
        rec = self.windows.pop(host)
        now = self.clock()
        took = fmt_duration(max(0.0, min(now, rec.ends_at) - rec.starts_at))
        await self._close(rec, now)
        self.live.set_maintenance(host, None)
        if self._holder is not None:
            self._holder.release(host)
        log.info("maintenance: %s %s after %s; reconnecting", host, how, took)
        return rec

    async def _close(self, rec: MaintenanceRecord, now: float) -> None:
        """End ``rec`` in the store and its silence now (both are no-ops once its end time has passed)."""
        if rec.ends_at > now:
            rec.ends_at = now
            if rec.id is not None:
                try:
                    await self.store.end_maintenance(rec.id, now)
                except Exception as exc:  # noqa: BLE001 - the host is released anyway: the operator asked
                    log.warning("maintenance: could not record the end of %s's window (%s): a collector "
                                "restarted before %s would hold it again", rec.host, exc, _utc(rec.ends_at))
        if rec.silence_id is not None:
            try:
                await self.muter.expire_silence(rec.silence_id)
            except Exception as exc:  # noqa: BLE001
                log.warning("maintenance: could not end silence %s of %s: %s", rec.silence_id, rec.host, exc)

    async def _expire_loop(self) -> None:
        while True:
            now = self.clock()
            due = [r.host for r in self.windows.values() if r.ends_at <= now]
            if due:
                async with self._lock:
                    for host in due:
                        if host in self.windows and self.windows[host].ends_at <= self.clock():
                            await self._finish(host, "window ended")
            ends = [r.ends_at for r in self.windows.values()]
            delay = min(max(min(ends) - self.clock(), 0.01), EXPIRY_CHECK) if ends else EXPIRY_CHECK
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._changed.wait(), delay)
