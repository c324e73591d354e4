"""The Xid watcher thread over the fake library's event set."""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpufleet.agent import wire
from gpufleet.agent.events import XidWatcher, xid_event

from .conftest import Env

XIDS = """
gpus:
  - {name: A}
  - {name: B}
timeline:
  - {at: 1, gpu: 1, xid: 79}
  - {at: 2, gpu: 0, event: xid, xid: 94}
"""


def watch(env: Env) -> tuple[XidWatcher, list[wire.Event], threading.Event]:
    got: list[wire.Event] = []
    arrived = threading.Event()

    def emit(ev: wire.Event) -> None:
        got.append(ev)
        arrived.set()

    handles = [g.handle for g in env.sampler.gpus]
    watcher = XidWatcher(env.gateway, handles, env.sampler.handle_map(), emit, wait_ms=10, wall=lambda: 5.0)
    return watcher, got, arrived


def test_xids_become_events(make_env: Callable[..., Env]) -> None:
    env = make_env(XIDS)
    watcher, got, arrived = watch(env)
    env.clock.advance(3)  # both Xids are due
    watcher.start()
    try:
        for _ in range(200):
            if len(got) == 2:
                break
            arrived.wait(0.05)
    finally:
        watcher.stop()
    assert watcher.active and not watcher.failed
    uuids = [g.uuid for g in env.sampler.gpus]
    assert sorted((e.xid, e.gpu_index, e.uuid) for e in got) == [(79, 1, uuids[1]), (94, 0, uuids[0])]
    for e in got:
        assert e.kind == "xid" and wire.decode(wire.encode(e)) == e
    assert "critical" in next(e.message for e in got if e.xid == 79)
    assert "warning" in next(e.message for e in got if e.xid == 94)


def test_xid_not_delivered_before_its_time(make_env: Callable[..., Env]) -> None:
    env = make_env(XIDS)
    es = env.gateway.event_set()
    for g in env.sampler.gpus:
        assert env.gateway.register_xid(g.handle, es)
    assert env.gateway.wait_event(es, 0) is None  # t=0: nothing yet (TIMEOUT)
    env.clock.advance(1.5)
    ev = env.gateway.wait_event(es, 0)
    assert ev is not None and ev.data == 79
    assert env.gateway.wait_event(es, 0) is None  # delivered once
    env.gateway.free_event_set(es)


def test_event_sets_unsupported_skip_quietly(make_env: Callable[..., Env]) -> None:
    env = make_env("event_sets: false\n" + XIDS)
    watcher, got, _ = watch(env)
    env.clock.advance(3)
    watcher.start()
    watcher.stop()
    assert got == [] and not watcher.active and not watcher.failed


def test_device_events_unsupported_skip_quietly(make_env: Callable[..., Env]) -> None:
    env = make_env(
        XIDS.replace("{name: A}", "{name: A, unsupported: [events]}").replace(
            "{name: B}", "{name: B, unsupported: [events]}"
        )
    )
    watcher, got, _ = watch(env)
    watcher.start()
    watcher.stop()
    assert got == [] and not watcher.active


def test_driver_error_stops_watcher(make_env: Callable[..., Env]) -> None:
    env = make_env(XIDS + "  - {at: 0.5, event: driver_error}\n")
    watcher, got, _ = watch(env)
    env.clock.advance(0.6)
    watcher.start()
    watcher.stop(timeout=5)
    assert watcher.failed and got == []


def test_xid_event_for_unknown_gpu() -> None:
    ev = xid_event(1.0, 13, None)
    assert ev.gpu_index is None and "unknown GPU" in ev.message and "info" in ev.message


def _failing_wait(env: Env, code: str) -> list[int]:
    """Make every nvmlEventSetWait fail at once with ``code``; returns the list of calls made."""
    from gpufleet.agent import nvml

    calls: list[int] = []

    def wait(event_set: object, timeout_ms: int) -> object:
        calls.append(timeout_ms)
        raise nvml.make_error(nvml.ERROR_CODES[code])

    env.lib.nvmlEventSetWait = wait  # type: ignore[method-assign]
    return calls


def test_event_wait_not_supported_stops_the_watcher(make_env: Callable[..., Env]) -> None:
    """A driver whose event wait answers FUNCTION_NOT_FOUND at once: stop, do not spin on it."""
    env = make_env(XIDS)
    calls = _failing_wait(env, "FUNCTION_NOT_FOUND")
    watcher, got, _ = watch(env)
    watcher.start()
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()  # the watcher gave up by itself (no stop() needed)
    assert calls == [10] and got == [] and not watcher.active and not watcher.failed


class _Halt(threading.Event):
    """A halt flag that records each back-off wait and ends the watcher after a few."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self.limit = limit

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


def test_event_wait_error_backs_off_between_tries(make_env: Callable[..., Env]) -> None:
    """Any other immediate error: retried, but with a wait in between (was a 100 % CPU loop)."""
    env = make_env(XIDS)
    calls = _failing_wait(env, "INSUFFICIENT_RESOURCES")
    watcher, got, _ = watch(env)
    watcher.halt = _Halt(limit=3)
    watcher.start()
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()
    assert len(calls) == 3 and watcher.halt.waits == [0.01, 0.01, 0.01] and got == []


def test_event_set_create_unknown_error_ends_the_watcher_quietly(make_env: Callable[..., Env]) -> None:
    """nvmlEventSetCreate answering UNKNOWN (mapped like a lost GPU) must not kill the thread with a trace."""
    from gpufleet.agent import nvml

    env = make_env(XIDS)

    def create() -> object:
        raise nvml.make_error(nvml.ERROR_CODES["UNKNOWN"])

    env.lib.nvmlEventSetCreate = create
    crashed: list[BaseException | None] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: crashed.append(args.exc_value)
    try:
        watcher, got, _ = watch(env)
        watcher.start()
        watcher._thread.join(10)
    finally:
        threading.excepthook = old_hook
    assert not watcher._thread.is_alive()
    assert crashed == [] and got == [] and not watcher.active and not watcher.failed
