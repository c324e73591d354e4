"""Xid events in their own thread: nvmlEventSetWait, pushing Event frames out.

Xids arrive between samples and must not wait for (or delay) the sampling loop. An event wakes the wait at
once, however long it is; the wait's length only bounds how long stopping takes (NVML cannot interrupt a
wait) and costs a wake-up each time it runs out: :data:`WAIT_MS` (1 s) is a wake-up a second, where 0.5 s
cost a sixth of the agent's CPU on tests/bench/agent_overhead.py. Where event sets are not
supported (some vGPU/WSL setups, the fake library without them) the watcher quietly does nothing. On a
driver error it stops and sets :attr:`XidWatcher.failed`; the main loop restarts it after re-init.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpufleet.agent import nvml
from gpufleet.agent.errors import DriverError, EventWaitError, GpuLostError
from gpufleet.agent.wire import CRITICAL_XIDS, WARNING_XIDS, Event

log = logging.getLogger(__name__)

#: How long one nvmlEventSetWait may block (module docstring): also the most that stopping waits for it.
WAIT_MS = 1000


def xid_event(ts: float, xid: int, gpu: tuple[int, str] | None) -> Event:
    level = "critical" if xid in CRITICAL_XIDS else "warning" if xid in WARNING_XIDS else "info"
    where = "unknown GPU" if gpu is None else f"GPU {gpu[0]} ({gpu[1]})"
    return Event(
        ts=ts,
        kind="xid",
        xid=xid,
        gpu_index=None if gpu is None else gpu[0],
        uuid=None if gpu is None else gpu[1],
        message=f"Xid {xid} ({level}) on {where}",
    )


class XidWatcher:
    """Waits on one NVML event set for Xid critical errors on every GPU that answers."""

    def __init__(
        self,
        gateway: nvml.Gateway,
        handles: list[object],
        gpus: dict[int, tuple[int, str]],
        emit: Callable[[Event], None],
        *,
        wait_ms: int = WAIT_MS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.gw = gateway
        self.handles = handles
        self.gpus = gpus  # nvml.handle_key(handle) -> (index, uuid)
        self.emit = emit
        self.wait_ms = wait_ms
        self.wall = wall
        self.halt = threading.Event()
        self.failed = False
        self.active = False  # True once at least one GPU is registered
        self.registered: list[object] = []  # the handles of the current event set
        self._thread = threading.Thread(target=self._run, name="xid-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self.halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            event_set = self._open(self.handles)
        except DriverError:
            self.failed = True
            return
        if event_set is None:
            return
        try:
            self._watch(event_set)
        except DriverError:
            self.failed = True

    def _open(self, handles: list[object]) -> object | None:
        """A new event set with every handle in ``handles`` that supports Xid events registered (the ones
        registered are kept in :attr:`registered`); None where there is nothing to watch."""
        try:
            event_set = self.gw.event_set()
        except GpuLostError as exc:  # UNKNOWN (e.g. no event set left): not a GPU loss, and not fatal
            log.warning("cannot create an NVML event set (%s); Xid events unavailable", exc)
            return None
        if event_set is None:
            log.debug("NVML event sets not supported; Xid events unavailable")
            return None
        self.registered = []
        for h in handles:
            try:
                if self.gw.register_xid(h, event_set):
                    self.registered.append(h)
            except GpuLostError:
                continue
            except DriverError:
                self._free(event_set)
                raise
        if not self.registered:
            log.debug("no GPU supports Xid events; watcher idle")
            self._free(event_set)
            return None
        self.active = True
        opened: object = event_set
        return opened

    def _free(self, event_set: object) -> None:
        try:
            self.gw.free_event_set(event_set)
        except (DriverError, GpuLostError):
            pass

    def _without_lost(self, event_set: object) -> object | None:
        """The wait answered GPU_IS_LOST: the driver says so for the whole set while any registered GPU is
        lost, so waiting on it again would never deliver another GPU's Xid (issue 32, item 11). Find the GPUs
        that no longer answer and wait on a new set of the others; the lost ones come back with the watcher
        the agent starts after an NVML re-init."""
        alive = [h for h in self.registered if self.gw.probe(h)]
        if len(alive) == len(self.registered):
            self.halt.wait(self.wait_ms / 1000.0)  # nothing we can tell apart: avoid a hot loop
            return event_set
        for h in self.registered:
            if h not in alive:
                gpu = self.gpus.get(nvml.handle_key(h))
                log.warning("Xid watcher: %s is lost; watching the other GPUs",
                            "a GPU" if gpu is None else f"GPU {gpu[0]} ({gpu[1]})")
        self._free(event_set)
        return self._open(alive) if alive else None

    def _watch(self, event_set: object) -> None:
        current: object | None = event_set
        try:
            while current is not None and not self.halt.is_set():
                try:
                    ev = self.gw.wait_event(current, self.wait_ms)
                except GpuLostError:
                    current = self._without_lost(current)
                    continue
                except EventWaitError as exc:
                    if exc.missing:  # this driver cannot wait on events: Xids are not watchable here
                        log.warning("Xid events unavailable on this host (%s); watcher stopped", exc)
                        self.active = False
                        return
                    log.debug("%s; retrying", exc)
                    self.halt.wait(self.wait_ms / 1000.0)  # an immediate error must not become a hot loop
                    continue
                if ev is None or not ev.event_type & nvml.EVENT_XID:
                    continue
                gpu = self.gpus.get(nvml.handle_key(ev.handle))
                event = xid_event(self.wall(), ev.data, gpu)
                log.warning("%s", event.message)
                self.emit(event)
        finally:
            if current is not None:
                self._free(current)
