"""How the sampler tells a lost GPU from a failing field, an unreadable GPU and a hung read (issue 32),
through the real gateway over the scenario fake; tests/fakenvml/test_nvml_reality.py does the same through
real pynvml and the fake C library."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpufleet.agent import wire
from gpufleet.agent.sampler import REINIT_FIRST
from gpufleet.agent.watchdog import Reads

from .conftest import Env

TWO = """
gpus:
  - name: GPU-A
    errors: {errors}
    processes:
      - {{pid: 100, user: alice, memory_mib: 2048, sm_util: 40}}
  - name: GPU-B
    processes:
      - {{pid: 200, user: bob, memory_mib: 4096, sm_util: 80}}
timeline: {timeline}
"""


def two(errors: str = "{}", timeline: str = "[]") -> str:
    return TWO.format(errors=errors, timeline=timeline)


def test_a_field_failing_with_unknown_is_null_and_named(make_env: Callable[..., Env]) -> None:
    env = make_env(two(errors="{fan: UNKNOWN, power: UNKNOWN}"))
    for _ in range(5):
        snap, events = env.sampler.sample()
        env.clock.advance(1)
        a = snap.gpus[0]
        assert events == [] and a.error is None and a.util_gpu == 40
        assert a.fan_speed is None and a.power_draw is None
        assert a.read_errors == {"fan_speed": "NVML_ERROR_UNKNOWN", "power_draw": "NVML_ERROR_UNKNOWN"}
    line = wire.encode(snap)
    assert wire.decode(line) == snap


def test_every_reading_failing_three_times_is_lost_then_answers_again(make_env: Callable[..., Env]) -> None:
    every = ", ".join(f"{f}: UNKNOWN" for f in ("utilization", "memory", "temperature", "temperature_v",
                                                  "power", "clocks", "throttle", "fan", "processes", "energy",
                                                  "field_values"))
    env = make_env(two(errors="{" + every + "}"))
    faults = []
    for _ in range(4):
        snap, events = env.sampler.sample()
        env.clock.advance(1)
        faults.append((snap.gpus[0].fault, [e.kind for e in events]))
    assert faults == [(None, []), (None, []), ("lost", ["gpu_lost"]), ("lost", [])]
    assert snap.gpus[1].error is None
    env.lib.scenario.gpus[0].errors.clear()
    snap, events = env.sampler.sample()
    assert snap.gpus[0].error is None and snap.gpus[0].util_gpu == 40 and events == []


def test_no_permission_on_the_handle_is_unreadable_never_lost(make_env: Callable[..., Env]) -> None:
    env = make_env(two(errors="{handle: NO_PERMISSION}"))
    for _ in range(4):
        snap, events = env.sampler.sample()
        env.clock.advance(1)
        assert events == []
        assert snap.gpus[0].fault == "unreadable" and "NO_PERMISSION" in (snap.gpus[0].error or "")
        assert snap.gpus[1].util_gpu == 80
    assert env.sampler.reinit_due() is False, "an unreadable GPU is not a lost one to look for"


def test_a_lost_gpu_drops_its_handle_and_nvml_is_reinitialised_with_backoff(
        make_env: Callable[..., Env]) -> None:
    env = make_env(two(timeline="[{at: 5, gpu: 0, event: lost}, {at: 200, gpu: 0, event: recover}]"))
    env.clock.advance(6)
    snap, events = env.sampler.sample()
    assert snap.gpus[0].fault == "lost" and [e.kind for e in events] == ["gpu_lost"]
    assert env.sampler.gpus[0].handle is None, "the dead handle is never read again"
    assert env.sampler.reinit_due() is False
    env.clock.advance(REINIT_FIRST)
    assert env.sampler.reinit_due() is True
    env.sampler.reopen()
    assert env.sampler.reinit_due() is False
    env.clock.advance(REINIT_FIRST)
    assert env.sampler.reinit_due() is False, "twice as long the second time"
    env.clock.advance(200)
    env.sampler.reopen()  # the GPU came back (a reset): a fresh handle, same UUID, same index
    snap, events = env.sampler.sample()
    assert snap.gpus[0].error is None and snap.gpus[0].util_gpu == 40 and events == []
    assert env.sampler.reinit_due() is False


def test_a_hung_read_marks_only_its_gpu(make_env: Callable[..., Env]) -> None:
    env = make_env(two(timeline="[{at: 5, gpu: 0, event: hang}, {at: 8, gpu: 0, event: unhang}]"),
                   hang_after=0.3)
    env.clock.advance(5)
    started = time.monotonic()
    snap, events = env.sampler.sample()
    assert time.monotonic() - started < 2.0
    assert snap.gpus[0].fault == "hung" and snap.gpus[1].util_gpu == 80
    assert [(e.kind, e.gpu_index) for e in events] == [("gpu_hung", 0)]
    readers = sum(t.name == "nvml-reader" for t in threading.enumerate())
    snap, events = env.sampler.sample()  # still stuck: not read again, no second event, no second thread
    assert snap.gpus[0].fault == "hung" and events == []
    assert sum(t.name == "nvml-reader" for t in threading.enumerate()) == readers
    env.clock.advance(3)  # the hang ends: the stuck read returns
    deadline = time.monotonic() + 5
    while env.sampler.reads.stuck() and time.monotonic() < deadline:
        time.sleep(0.02)
    snap, events = env.sampler.sample()
    assert snap.gpus[0].error is None and snap.gpus[0].util_gpu == 40 and events == []


def test_reads_hand_the_rest_of_a_batch_to_a_fresh_worker() -> None:
    release = threading.Event()
    reads = Reads(hang_after=0.2)
    results, hung = reads.run([("a", lambda: 1), ("b", release.wait), ("c", lambda: 3)])
    assert results == {"a": 1, "c": 3} and list(hung) == ["b"]
    assert list(reads.stuck()) == ["b"]
    results, hung = reads.run([("b", lambda: 2), ("c", lambda: 4)])
    assert results == {"c": 4} and hung == {}, "a stuck key is not read again"
    release.set()
    hung_thread = reads.stuck()["b"].thread
    hung_thread.join(2)
    assert reads.stuck() == {}
    assert reads.run([("b", lambda: 2)]) == ({"b": 2}, {})
    reads.close()


def test_a_failing_event_wait_on_a_lost_gpu_does_not_starve_the_others(make_env: Callable[..., Env]) -> None:
    from gpufleet.agent.events import XidWatcher

    env = make_env(two(timeline="[{at: 5, gpu: 1, event: lost}, {at: 6, gpu: 0, xid: 48}]"))
    env.lib.sleep = time.sleep
    got: list[wire.Event] = []
    handles = [g.handle for g in env.sampler.gpus]
    watcher = XidWatcher(env.gateway, handles, env.sampler.handle_map(), got.append, wait_ms=50)
    watcher.start()
    try:
        env.clock.advance(5.5)
        time.sleep(0.3)  # the wait answers GPU_IS_LOST
        env.clock.advance(1)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watcher.stop()
    assert [(e.xid, e.gpu_index) for e in got] == [(48, 0)]
