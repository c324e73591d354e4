"""Sampler behaviour over a scenario timeline: lost GPUs, driver errors, tiering, attribution."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpufleet.agent import wire
from gpufleet.agent.errors import DriverError, NvmlUnavailable
from gpufleet.agent.procinfo import ProcInfo, Status
from gpufleet.agent.sampler import shrink_to_fit

from .conftest import Env

TWO_GPUS = """
gpus:
  - name: GPU-A
    processes:
      - {pid: 100, user: alice, command: python a.py, memory_mib: 2048, sm_util: 40, start_offset_s: -60}
  - name: GPU-B
    ecc_uncorrected: {points: [[0, 0], [5, 3]], step: true}
    processes:
      - {pid: 200, user: bob, command: python b.py, memory_mib: 4096, sm_util: 80, job: "77"}
timeline:
  - {at: 10, gpu: 1, event: lost}
  - {at: 20, gpu: 1, event: recover}
"""


def roundtrip(frame: wire.Frame) -> bytes:
    """Encoded, decoded by the collector's decoder and encoded again: must be the same line."""
    line: bytes = wire.encode(wire.decode(wire.encode(frame)))
    return line


def test_snapshot_fields_and_attribution(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    snap, events = env.sampler.sample()
    assert events == [] and snap.seq == 1
    a, b = snap.gpus
    assert (a.index, a.name, b.index, b.name) == (0, "GPU-A", 1, "GPU-B")
    assert a.uuid.startswith("GPU-") and a.uuid != b.uuid
    assert a.util_gpu == 40 and b.util_gpu == 80
    assert a.memory_used == 2048 << 20
    [pa] = a.processes
    assert (pa.pid, pa.user, pa.command, pa.gpu_memory, pa.sm_util, pa.attributed) == (
        100,
        "alice",
        "python a.py",
        2048 << 20,
        40,
        True,
    )
    assert pa.start_time == pytest.approx(1_700_000_000.0 - 60)
    assert b.processes[0].job == "77"
    assert roundtrip(snap) == wire.encode(snap)
    assert env.sampler.pid_namespace_ok is True


def test_seq_increases(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    seqs = [env.sampler.sample()[0].seq for _ in range(3)]
    assert seqs == [1, 2, 3]


def test_gpu_lost_once_then_recovers(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    env.clock.advance(10.5)
    snap, events = env.sampler.sample()
    a, b = snap.gpus
    assert a.error is None and a.util_gpu == 40 and a.processes  # the other GPU is still reported
    assert b.error is not None and "GPU_IS_LOST" in b.error
    assert b.uuid == env.lib.scenario.gpus[1].uuid and b.util_gpu is None
    assert [(e.kind, e.gpu_index, e.uuid) for e in events] == [("gpu_lost", 1, b.uuid)]
    assert roundtrip(events[0]) == wire.encode(events[0])
    assert roundtrip(snap) == wire.encode(snap)
    # still lost: error entry every interval, but no second event
    env.clock.advance(1)
    snap, events = env.sampler.sample()
    assert events == [] and snap.gpus[1].error is not None
    # answers again after 20 s
    env.clock.advance(10)
    snap, events = env.sampler.sample()
    assert events == [] and snap.gpus[1].error is None and snap.gpus[1].util_gpu == 80
    # a second loss is a second event
    env.lib.scenario.gpus[1].lost.append((40, 50))
    env.clock.advance(20)
    _, events = env.sampler.sample()
    assert [e.kind for e in events] == ["gpu_lost"]


def test_gpu_lost_at_start(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS.replace("at: 10, gpu: 1", "at: 0, gpu: 1"))
    hello = env.sampler.hello("h", "0")
    assert [g.index for g in hello.gpus] == [0, 1]
    snap, events = env.sampler.sample()
    assert snap.gpus[0].error is None and snap.gpus[1].error is not None
    assert [e.kind for e in events] == ["gpu_lost"]


def test_slow_tier_is_cached(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS, slow_every=30.0)
    assert env.sampler.sample()[0].gpus[1].ecc_uncorrected == 0
    env.clock.advance(6)  # the count went to 3 at t=5, but ECC is read every 30 s
    assert env.sampler.sample()[0].gpus[1].ecc_uncorrected == 0
    calls = env.lib.calls
    env.sampler.sample()
    fast_calls = env.lib.calls - calls
    env.clock.advance(25)
    calls = env.lib.calls
    assert env.sampler.sample()[0].gpus[1].ecc_uncorrected == 3
    assert env.lib.calls - calls > fast_calls  # the slow tier ran this time


def test_driver_error_propagates_and_reopen_recovers(make_env: Callable[..., Env]) -> None:
    env = make_env(
        TWO_GPUS + "  - {at: 3, event: driver_error, code: LIB_RM_VERSION_MISMATCH, duration: 4}\n"
    )
    env.sampler.sample()
    env.clock.advance(3.5)
    with pytest.raises(DriverError, match="LIB_RM_VERSION_MISMATCH"):
        env.sampler.sample()
    with pytest.raises(NvmlUnavailable):
        env.sampler.reopen()
    env.clock.advance(4)
    env.sampler.reopen()
    snap, _ = env.sampler.sample()
    assert [g.error for g in snap.gpus] == [None, None]
    assert snap.gpus[0].uuid == env.lib.scenario.gpus[0].uuid


def test_process_timeline_idle_zombie_stop(make_env: Callable[..., Env]) -> None:
    env = make_env(
        """
gpus:
  - orphan_memory_mib: {points: [[0, 0], [30, 512]], step: true}
    processes:
      - {pid: 300, user: carol, command: python c.py, memory_mib: 1000, sm_util: 60}
      - {pid: 301, user: dave, command: python d.py, memory_mib: 500, sm_util: 10, start_at: 5}
timeline:
  - {at: 10, pid: 300, event: idle}
  - {at: 20, pid: 300, event: zombie}
  - {at: 30, pid: 300, event: stop}
"""
    )

    def procs() -> dict[int, tuple[str | None, int | None]]:
        snap, _ = env.sampler.sample()
        return {p.pid: (p.state, p.sm_util) for p in snap.gpus[0].processes}

    assert procs() == {300: ("S", 60)}
    env.clock.advance(6)
    assert procs() == {300: ("S", 60), 301: ("S", 10)}
    env.clock.advance(5)  # t=11: idle, memory kept
    assert procs() == {300: ("S", 0), 301: ("S", 10)}
    env.clock.advance(10)  # t=21: zombie still holding memory
    snap, _ = env.sampler.sample()
    z = next(p for p in snap.gpus[0].processes if p.pid == 300)
    assert z.state == "Z" and z.gpu_memory == 1000 << 20 and z.sm_util == 0
    env.clock.advance(10)  # t=31: gone, its memory orphaned
    snap, _ = env.sampler.sample()
    assert [p.pid for p in snap.gpus[0].processes] == [301]
    assert snap.gpus[0].memory_used == (500 + 512) << 20


def test_util_curve_and_loop(make_env: Callable[..., Env]) -> None:
    env = make_env("gpus:\n  - util: {points: [[0, 90], [60, 30]], loop: 60}\n")
    assert env.sampler.sample()[0].gpus[0].util_gpu == 90
    env.clock.advance(30)
    assert env.sampler.sample()[0].gpus[0].util_gpu == 60
    env.clock.advance(30)  # loops back to t=0
    assert env.sampler.sample()[0].gpus[0].util_gpu == 90


def test_heating_gpu_throttles(make_env: Callable[..., Env]) -> None:
    env = make_env(
        "gpus:\n  - temp_slowdown: 87\n    temperature: [[0, 60], [20, 90]]\n"
        "    processes: [{pid: 9, user: bob, memory_mib: 10, sm_util: 90}]\n"
    )
    first = env.sampler.sample()[0].gpus[0]
    assert first.temperature == 60 and not {"sw_thermal", "hw_thermal"} & set(first.throttle_reasons or [])
    env.clock.advance(20)
    hot = env.sampler.sample()[0].gpus[0]
    assert hot.temperature == 90 and hot.temp_slowdown == 87
    assert {"sw_thermal", "hw_thermal"} <= set(hot.throttle_reasons or [])
    assert hot.clock_sm is not None and first.clock_sm is not None and hot.clock_sm < first.clock_sm


def test_sm_util_held_between_samples_then_zero_then_unknown(make_env: Callable[..., Env]) -> None:
    env = make_env(
        "gpus:\n  - processes: [{pid: 9, user: bob, memory_mib: 10, sm_util: 70}]\n", util_hold=3.0
    )
    assert env.sampler.sample()[0].gpus[0].processes[0].sm_util == 70
    # same 100 ms sample slot: NVML has no new sample (NOT_FOUND); the recent value is held
    assert env.sampler.sample()[0].gpus[0].processes[0].sm_util == 70
    env.lib.scenario.gpus[0].errors["process_util"] = 6  # NOT_FOUND from now on: nothing ran
    env.clock.advance(5)
    assert env.sampler.sample()[0].gpus[0].processes[0].sm_util == 0
    env.lib.scenario.gpus[0].errors["process_util"] = 3  # NOT_SUPPORTED: per-process util is unknown
    env.clock.advance(5)
    assert env.sampler.sample()[0].gpus[0].processes[0].sm_util is None


class Unreadable:
    """A ProcSource whose entries all exist but cannot be read (hidepid)."""

    def __init__(self, status: Status, hidden: bool = False) -> None:
        self.status = status
        self.hidden = hidden

    def lookup(self, pid: int) -> ProcInfo:
        return ProcInfo(pid, status=self.status)

    def hides_pids(self) -> bool:
        return self.hidden

    def forget(self, live_pids: set[int]) -> None:
        pass


def test_unreadable_processes_are_unattributed_not_dead(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    env.sampler.procs = Unreadable("denied")
    snap, _ = env.sampler.sample()
    p = snap.gpus[0].processes[0]
    assert p.pid == 100 and p.attributed is False and p.user is None and p.gpu_memory == 2048 << 20
    assert env.sampler.pid_namespace_ok is True


def test_pids_not_in_proc_means_other_pid_namespace(
    make_env: Callable[..., Env], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(TWO_GPUS)
    env.sampler.procs = Unreadable("missing")
    env.sampler.sample()
    env.sampler.sample()
    assert env.sampler.pid_namespace_ok is False
    assert env.sampler.hello("h", "0").pid_namespace_ok is False
    assert sum("host PID namespace" in r.getMessage() for r in caplog.records) == 1


def test_hello(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    hello = env.sampler.hello("gpu-node-01", "9.9")
    assert hello.backend == "fake" and hello.hostname == "gpu-node-01" and hello.agent_version == "9.9"
    assert hello.driver_version == "550.54.15" and hello.cuda_version == 12040
    assert [g.memory_total for g in hello.gpus] == [81920 << 20] * 2
    assert roundtrip(hello) == wire.encode(hello)


def test_huge_snapshot_is_shrunk_below_the_line_bound(make_env: Callable[..., Env]) -> None:
    procs = "\n".join(
        f"      - {{pid: {1000 + i}, user: u{i}, command: '{'x' * 3000}', memory_mib: {i + 1}, sm_util: 1}}"
        for i in range(400)
    )
    env = make_env(f"gpus:\n  - processes:\n{procs}\n")
    snap, _ = env.sampler.sample()
    assert len(wire.encode(snap)) > 1 << 20
    small = shrink_to_fit(snap)
    assert len(wire.encode(small)) <= wire.MAX_LINE_BYTES
    assert len(small.gpus[0].processes) == 400  # shortening the commands was enough
    assert all(len(p.command or "") <= 203 for p in small.gpus[0].processes)


def test_shrink_cuts_processes_keeping_the_biggest() -> None:
    many = [
        wire.ProcessSample(pid=i, gpu_memory=i, user="u" * 50, command="c" * 150, container="f" * 64)
        for i in range(1, 6000)
    ]
    snap = wire.Snapshot(ts=1.0, seq=1, gpus=[wire.GpuSample(index=0, uuid="GPU-x", processes=many)])
    small = shrink_to_fit(snap)
    assert len(wire.encode(small)) <= wire.MAX_LINE_BYTES
    kept = small.gpus[0].processes
    assert 0 < len(kept) < 6000 and kept[0].pid == 5999


def test_pids_hidden_by_hidepid_are_not_a_namespace_problem(make_env: Callable[..., Env]) -> None:
    env = make_env(TWO_GPUS)
    env.sampler.procs = Unreadable("missing", hidden=True)
    snap, _ = env.sampler.sample()
    assert env.sampler.pid_namespace_ok is None
    assert all(not p.attributed for g in snap.gpus for p in g.processes)


THREE_GPUS = """
gpus:
  - name: GPU-A
  - name: GPU-B
    processes: [{pid: 200, user: bob, command: python b.py, memory_mib: 100, sm_util: 10}]
  - name: GPU-C
    processes: [{pid: 300, user: carol, command: python c.py, memory_mib: 300, sm_util: 30}]
timeline:
  - {at: 3, event: driver_error, code: DRIVER_NOT_LOADED, duration: 4}
"""


def test_reinit_matches_gpus_by_uuid_and_reports_one_that_vanished(make_env: Callable[..., Env]) -> None:
    """GPU 1 falls off the bus during a driver outage: after re-init GPU 2 is index 1 and keeps its UUID."""
    env = make_env(THREE_GPUS)
    a, b, c = (g.uuid for g in env.lib.scenario.gpus)
    assert [g.uuid for g in env.sampler.sample()[0].gpus] == [a, b, c]
    env.clock.advance(3.5)
    with pytest.raises(DriverError):
        env.sampler.sample()
    del env.lib.scenario.gpus[1]  # the driver comes back without it; NVML renumbers the rest
    env.lib._handles = env.lib._handles[:2]
    env.clock.advance(4)
    env.sampler.reopen()
    snap, events = env.sampler.sample()
    assert [(g.index, g.uuid, g.name, g.error) for g in snap.gpus] == [
        (0, a, "GPU-A", None),
        (1, c, "GPU-C", None),
    ]
    assert [p.pid for p in snap.gpus[1].processes] == [300]
    assert [(e.kind, e.gpu_index, e.uuid) for e in events] == [("gpu_lost", 1, b)]
    assert "no longer listed" in events[0].message
    assert env.sampler.sample()[1] == []  # reported once
    assert [(g.index, g.uuid) for g in env.sampler.hello("h", "0").gpus] == [(0, a), (1, c)]


def test_reinit_keeps_the_uuid_of_a_gpu_that_cannot_answer_yet(make_env: Callable[..., Env]) -> None:
    env = make_env(THREE_GPUS)
    uuids = [g.uuid for g in env.lib.scenario.gpus]
    env.lib.scenario.gpus[2].lost.append((5.0, 100.0))  # still lost when the driver comes back
    env.clock.advance(7.5)
    env.sampler.reopen()
    snap, events = env.sampler.sample()
    assert [g.uuid for g in snap.gpus] == uuids and snap.gpus[2].error is not None
    assert [(e.kind, e.uuid) for e in events] == [("gpu_lost", uuids[2])]


def test_driver_failing_right_after_init_is_a_failed_reopen(make_env: Callable[..., Env]) -> None:
    """nvmlInit succeeds but the next call fails: reopen raises NvmlUnavailable, so the agent retries."""
    from gpufleet.agent import nvml

    env = make_env(THREE_GPUS)
    real = env.lib.nvmlDeviceGetHandleByIndex
    fail = [True]

    def flaky(index: int) -> object:
        if fail[0]:
            raise nvml.make_error(nvml.ERROR_CODES["DRIVER_NOT_LOADED"])
        return real(index)

    env.lib.nvmlDeviceGetHandleByIndex = flaky  # type: ignore[method-assign]
    with pytest.raises(NvmlUnavailable, match="DRIVER_NOT_LOADED"):
        env.sampler.reopen()
    fail[0] = False
    env.sampler.reopen()
    assert [g.error for g in env.sampler.sample()[0].gpus] == [None, None, None]
