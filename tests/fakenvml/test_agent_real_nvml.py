"""The real gpufleet-agent, real pynvml, fake libnvidia-ml.so.1: the agent's NVML code path end to end."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpufleet.agent import wire

from tests.fakenvml import fakelib
from tests.fakenvml.agentrun import run_agent, run_once, streaming

GIB = 1 << 30


def busy_state() -> dict[str, Any]:
    state = fakelib.default_state(2)
    state["gpus"][0].update(
        util=37,
        util_mem=12,
        mem_used=30 * GIB,
        mem_reserved=512 << 20,
        temp=71,
        power_mw=312_500,
        power_limit_mw=350_000,
        clock_sm=1410,
        clock_mem=1593,
        throttle=0x4 | 0x20,
        fan=55,
        ecc_corrected=3,
        ecc_uncorrected=1,
        temp_slowdown=88,
        temp_shutdown=93,
        processes=[
            {"pid": os.getpid(), "mem": 6 * GIB, "sm": 42, "memutil": 7},  # a real pid: attributed
            {"pid": 3_999_999, "mem": 2 * GIB, "type": "both"},  # no such pid: unattributed
        ],
    )
    state["gpus"][1].update(
        mig=1,
        mig_instances=[{"gi": 1, "ci": 0, "uuid": "MIG-aaaa", "mem_total": 40 * GIB, "mem_used": GIB}],
    )
    return state


def test_once_json_reports_the_state(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = busy_state()
    snap = run_once(agent_cmd, fake_nvml_dir, fakelib.write_state(tmp_path / "state", state))
    g0, g1 = snap.gpus
    assert (g0.index, g0.uuid, g1.uuid) == (0, state["gpus"][0]["uuid"], state["gpus"][1]["uuid"])
    assert g0.name == "NVIDIA A100-SXM4-80GB" and g0.serial == "1321021000000"
    assert g0.pci_bus_id == "00000000:07:00.0" and g0.error is None
    assert (g0.util_gpu, g0.util_mem) == (37, 12)
    assert g0.sm_active is None  # no sm_active in the state: an A100 without GPM
    assert (g0.memory_total, g0.memory_used, g0.memory_reserved) == (80 * GIB, 30 * GIB, 512 << 20)
    assert (g0.temperature, g0.temp_slowdown, g0.temp_shutdown) == (71, 88, 93)
    assert (g0.power_draw, g0.power_limit) == (312.5, 350.0)
    assert (g0.clock_sm, g0.clock_mem, g0.fan_speed) == (1410, 1593, 55)
    assert g0.throttle_reasons == ["sw_power_cap", "sw_thermal"]
    assert (g0.ecc_corrected, g0.ecc_uncorrected, g0.mig_mode) == (3, 1, False)

    mine, ghost = g0.processes
    assert (mine.pid, mine.kind, mine.gpu_memory, mine.sm_util, mine.mem_util) == (
        os.getpid(),
        "compute",
        6 * GIB,
        42,
        7,
    )
    assert mine.attributed and mine.command and mine.uid == os.getuid() and mine.start_time
    assert (ghost.pid, ghost.kind, ghost.gpu_memory, ghost.attributed) == (
        3_999_999,
        "compute+graphics",
        2 * GIB,
        False,
    )

    assert g1.mig_mode is True and g1.processes == []
    assert [(m.gi_id, m.ci_id, m.uuid, m.memory_total, m.memory_used) for m in g1.mig_instances] == [
        (1, 0, "MIG-aaaa", 40 * GIB, GIB)
    ]


def test_unsupported_and_denied_fields_are_null(
    agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path
) -> None:
    state = busy_state()
    state["gpus"][0].update(
        unsupported=["temperature", "fan", "ecc", "thresholds", "process_util"], noperm=["power"], serial=None
    )
    g0, g1 = run_once(agent_cmd, fake_nvml_dir, fakelib.write_state(tmp_path / "state", state)).gpus
    assert g0.temperature is None and g0.fan_speed is None and g0.power_draw is None and g0.serial is None
    assert g0.ecc_corrected is None and g0.ecc_uncorrected is None
    assert g0.temp_slowdown is None and g0.temp_shutdown is None
    assert [p.sm_util for p in g0.processes] == [None, None]  # no process-utilization samples at all
    # the rest is still there
    assert g0.error is None and (g0.util_gpu, g0.memory_used, g0.power_limit, g0.clock_sm) == (
        37,
        30 * GIB,
        350.0,
        1410,
    )
    assert [p.pid for p in g0.processes] == [os.getpid(), 3_999_999]
    assert g1.temperature == 33 and g1.fan_speed == 30


def test_missing_symbols_give_null_or_fall_back(
    agent_cmd: list[str], fake_nvml_build: Callable[..., Path], tmp_path: Path
) -> None:
    lib_dir = fake_nvml_build(
        (
            "nvmlDeviceGetFanSpeed",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
        )
    )
    state = busy_state()
    g0 = run_once(agent_cmd, lib_dir, fakelib.write_state(tmp_path / "state", state)).gpus[0]
    assert g0.fan_speed is None  # FUNCTION_NOT_FOUND: null, nothing else lost
    # MemoryInfo v1 fallback: reserved unknown, and v1 counts it as used
    assert (g0.memory_total, g0.memory_used, g0.memory_reserved) == (80 * GIB, 30 * GIB + (512 << 20), None)
    assert g0.throttle_reasons == ["sw_power_cap", "sw_thermal"]  # the deprecated ThrottleReasons call
    assert [(p.pid, p.kind) for p in g0.processes] == [
        (os.getpid(), "compute"),
        (3_999_999, "compute+graphics"),
    ]
    assert g0.temperature == 71 and g0.util_gpu == 37


def test_gpm_sm_activity_through_pynvml_structs(
    agent_cmd: list[str], fake_nvml_build: Callable[..., Path], tmp_path: Path
) -> None:
    """GPM through pynvml's real ctypes (c_nvmlGpmMetricsGet_t): the first snapshot has one sample and no
    value, later ones the SM activity; a driver without the nvmlGpm* symbols reports null, the rest intact."""
    state = busy_state()
    state["gpus"][0]["sm_active"] = 64
    path = fakelib.write_state(tmp_path / "state", state)
    no_gpm = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
              "nvmlGpmMetricsGet")
    for lib_dir, want in ((fake_nvml_build(), 64), (fake_nvml_build(no_gpm), None)):
        result = run_agent(agent_cmd, lib_dir, path, "--interval", "0.1", "--max-frames", "3")
        assert result.returncode == 0, result.stderr.decode()
        snaps = [f for f in map(wire.decode, result.stdout.splitlines()) if isinstance(f, wire.Snapshot)]
        assert [[g.sm_active for g in s.gpus] for s in snaps] == [[None, None], [want, None], [want, None]]
        assert all(s.gpus[0].util_gpu == 37 for s in snaps)


def test_stream_decodes_and_a_lost_gpu_does_not_stop_the_others(
    agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path
) -> None:
    state = busy_state()
    state["gpus"][1]["lost"] = True
    path = fakelib.write_state(tmp_path / "state", state)
    result = run_agent(agent_cmd, fake_nvml_dir, path, "--interval", "0.1", "--max-frames", "3")
    assert result.returncode == 0, result.stderr.decode()
    frames = [wire.decode(line) for line in result.stdout.splitlines()]
    assert isinstance(frames[0], wire.Hello)
    hello = frames[0]
    assert (hello.driver_version, hello.nvml_version, hello.cuda_version) == (
        "550.54.15",
        "12.550.54.15",
        12040,
    )
    assert hello.backend == "nvml" and [g.uuid for g in hello.gpus][0] == state["gpus"][0]["uuid"]
    snaps = [f for f in frames if isinstance(f, wire.Snapshot)]
    assert [s.seq for s in snaps] == [1, 2, 3]
    lost_events = [f for f in frames if isinstance(f, wire.Event) and f.kind == "gpu_lost"]
    assert len(lost_events) == 1 and lost_events[0].gpu_index == 1  # once per loss, not per interval
    for s in snaps:
        g0, g1 = s.gpus
        assert g0.error is None and g0.util_gpu == 37 and len(g0.processes) == 2
        assert g1.index == 1 and g1.error and "GPU_IS_LOST" in g1.error and g1.util_gpu is None


def test_state_changes_reach_later_snapshots(
    agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path
) -> None:
    state = busy_state()
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        assert isinstance(stream.next(), wire.Hello)
        first = stream.until(lambda f: isinstance(f, wire.Snapshot))[-1]
        assert isinstance(first, wire.Snapshot) and first.gpus[0].util_gpu == 37

        state["gpus"][0].update(util=91, mem_used=70 * GIB, processes=[{"pid": os.getpid(), "mem": 9 * GIB}])
        state["xids"] = [(0, 79)]
        fakelib.write_state(path, state)
        seen = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.gpus[0].util_gpu == 91)
        changed = seen[-1]
        assert isinstance(changed, wire.Snapshot)
        assert changed.gpus[0].memory_used == 70 * GIB
        assert [(p.pid, p.gpu_memory) for p in changed.gpus[0].processes] == [(os.getpid(), 9 * GIB)]
        # the Xid comes from the watcher thread: before or after that snapshot
        if not any(isinstance(f, wire.Event) and f.kind == "xid" for f in seen):
            seen += stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "xid")
        xids = [f for f in seen if isinstance(f, wire.Event) and f.kind == "xid"]
        assert [(x.xid, x.gpu_index, x.uuid) for x in xids] == [(79, 0, state["gpus"][0]["uuid"])]

        state["gpus"][0]["lost"] = True
        fakelib.write_state(path, state)
        lost = stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "gpu_lost")[-1]
        assert isinstance(lost, wire.Event) and lost.gpu_index == 0
        after = stream.until(lambda f: isinstance(f, wire.Snapshot))[-1]
        assert isinstance(after, wire.Snapshot)
        assert after.gpus[0].error and after.gpus[1].error is None and after.gpus[1].mig_instances

        state["gpus"][0]["lost"] = False
        fakelib.write_state(path, state)
        back = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.gpus[0].error is None)[-1]
        assert isinstance(back, wire.Snapshot) and back.gpus[0].util_gpu == 91


def test_driver_missing_is_a_clear_exit(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    result = run_agent(agent_cmd, fake_nvml_dir, tmp_path / "absent", "--once", "--json")
    assert result.returncode == 2 and result.stdout == b""
    assert "not loaded" in result.stderr.decode()


@pytest.mark.parametrize("code", [18])  # LIB_RM_VERSION_MISMATCH, as after an unattended driver upgrade
def test_driver_mismatch_at_start_is_a_clear_exit(
    agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path, code: int
) -> None:
    path = fakelib.write_state(tmp_path / "state", {**fakelib.default_state(1), "init_error": code})
    result = run_agent(agent_cmd, fake_nvml_dir, path, "--once", "--json")
    assert result.returncode == 2 and "mismatch" in result.stderr.decode()


def test_event_wait_missing_stops_the_xid_watcher(
    agent_cmd: list[str], fake_nvml_build: Callable[..., Path], tmp_path: Path
) -> None:
    """nvmlEventSetWait_v2 missing (FUNCTION_NOT_FOUND at once): one warning, snapshots go on (no spin)."""
    lib_dir = fake_nvml_build(("nvmlEventSetWait_v2",))
    path = fakelib.write_state(tmp_path / "state", busy_state())
    result = run_agent(agent_cmd, lib_dir, path, "--interval", "0.1", "--max-frames", "3")
    assert result.returncode == 0, result.stderr.decode()
    frames = [wire.decode(line) for line in result.stdout.splitlines()]
    assert [f.seq for f in frames if isinstance(f, wire.Snapshot)] == [1, 2, 3]
    err = result.stderr.decode()
    assert err.count("Xid events unavailable") == 1 and "FUNCTION_NOT_FOUND" in err
