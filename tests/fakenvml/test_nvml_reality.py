"""NVML as real drivers behave (issue 32), through the real gpufleet-agent, the installed nvidia-ml-py and the
fake libnvidia-ml.so.1. Each test names the public record of the behaviour it models.

CI runs this folder under the newest nvidia-ml-py 13.x and under 12.535.77 (the oldest pyproject allows).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from gpufleet.agent import wire

from tests.fakenvml import fakelib
from tests.fakenvml.agentrun import run_agent, run_once, streaming

GIB = 1 << 30
NO_PERMISSION, UNKNOWN = 4, 999


def state_with(*gpus: dict[str, Any]) -> dict[str, Any]:
    state = fakelib.default_state(len(gpus))
    for i, extra in enumerate(gpus):
        state["gpus"][i].update(extra)
    return state


def once(agent_cmd: list[str], lib: Path, tmp_path: Path, state: dict[str, Any]) -> wire.Snapshot:
    return run_once(agent_cmd, lib, fakelib.write_state(tmp_path / "state", state))


# ------------------------------------------------------------------------------- 1: idle processes read 0


def test_a_process_without_a_utilization_sample_used_zero_sm(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """NVML keeps per-process samples only for processes that ran kernels and answers NOT_FOUND when none did
    (NVML API reference, nvmlDeviceGetProcessUtilization; nvitop gives such a process 0 %). Reading that as
    "unknown" made an idle job's mean SM util the mean of its busy seconds alone."""
    state = state_with(
        {"util": 60, "processes": [{"pid": 4001, "mem": GIB, "sm": 60}, {"pid": 4002, "mem": GIB}]},
        {"processes": [{"pid": 4003, "mem": GIB}, {"pid": 4004, "mem": GIB, "sm": 0}]},  # none ran: NOT_FOUND
    )
    snap = once(agent_cmd, fake_nvml_dir, tmp_path, state)
    assert [(p.pid, p.sm_util) for p in snap.gpus[0].processes] == [(4001, 60), (4002, 0)]
    assert [(p.pid, p.sm_util) for p in snap.gpus[1].processes] == [(4003, 0), (4004, 0)]


def test_per_process_utilization_not_supported_stays_unknown(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = state_with({"unsupported": ["process_util"], "processes": [{"pid": 4001, "mem": GIB, "sm": 60}]})
    snap = once(agent_cmd, fake_nvml_dir, tmp_path, state)
    assert [(p.pid, p.sm_util) for p in snap.gpus[0].processes] == [(4001, None)]


# ------------------------------------------------------------------ 2: one failing field is not a lost GPU


def test_a_field_answering_unknown_is_null_and_named_not_a_lost_gpu(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """Consumer boards answer UNKNOWN for the fan (gpustat issue #161 shows its neighbour NOT_SUPPORTED on the
    same read), power reads show ``ERR!`` now and then: that field is null, the GPU is fine."""
    state = state_with({"util": 40, "fail": {"fan": UNKNOWN, "power": UNKNOWN}}, {})
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        frames = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.seq == 5)
    assert not [f for f in frames if isinstance(f, wire.Event)]
    snaps = [f for f in frames if isinstance(f, wire.Snapshot)]
    for snap in snaps:
        g = snap.gpus[0]
        assert g.error is None and g.fault is None and g.util_gpu == 40 and g.temperature == 33
        assert g.fan_speed is None and g.power_draw is None
        assert g.read_errors == {"fan_speed": "NVML_ERROR_UNKNOWN", "power_draw": "NVML_ERROR_UNKNOWN"}
        assert snap.gpus[1].read_errors is None


def test_every_reading_failing_for_three_samples_is_a_lost_gpu(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    every = {f: UNKNOWN for f in fakelib.FEATURES if f not in ("handle", "name", "uuid", "serial", "pci")}
    state = state_with({"fail": every}, {})
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        frames = stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "gpu_lost")
        snap = stream.until(lambda f: isinstance(f, wire.Snapshot))[-1]
    early = [f for f in frames if isinstance(f, wire.Snapshot)]
    assert [s.gpus[0].fault for s in early[:2]] == [None, None], "two bad samples are not a lost GPU"
    assert isinstance(snap, wire.Snapshot) and snap.gpus[0].fault == "lost"
    assert "every reading failed for 3 samples (NVML_ERROR_UNKNOWN)" in (snap.gpus[0].error or "")
    assert snap.gpus[1].error is None


# ------------------------------------------------- 3: nvidia-ml-py and driver struct layouts, any pairing


@pytest.mark.parametrize("driver", ["r535", "r550"])
def test_process_lists_read_right_whatever_struct_the_driver_writes(
        agent_cmd: list[str], fake_nvml_build: Callable[..., Path], tmp_path: Path, driver: str) -> None:
    """r535 drivers write a 32-byte process struct (``usedGpuCcProtectedMemory``), later ones 24 bytes;
    nvidia-ml-py 12.535.77 declares 32 and 13.x 24, so the wrong pair scrambles pids and memory (nvitop
    issue #75 and PR #79, gpustat issue #161, gpuopenanalytics/pynvml issue #50). The agent reads the
    layout from the driver's own symbols, as nvitop does; pynvml's own call shows the scramble."""
    omit = ["nvmlDeviceGetRunningProcessDetailList"] if driver == "r535" else []
    lib = fake_nvml_build(omit=omit)
    procs = [{"pid": 5000 + i, "mem": (i + 1) * GIB, "sm": 10 * (i + 1)} for i in range(3)]
    state = state_with({"util": 30, "processes": procs})
    snap = once(agent_cmd, lib, tmp_path, state)
    assert [(p.pid, p.gpu_memory) for p in snap.gpus[0].processes] == [(5000, GIB), (5001, 2 * GIB),
                                                                       (5002, 3 * GIB)]
    code = ("import pynvml as N\nN.nvmlInit()\nh = N.nvmlDeviceGetHandleByIndex(0)\n"
            "print([p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=fakelib.env_for(lib, tmp_path / "state"), check=False)
    declared = ctypes.sizeof(pynvml.c_nvmlProcessInfo_t)  # 32 in 12.535.77, 24 in 13.x
    if (declared == 32) == (driver == "r535"):
        assert result.stdout.strip() == "[5000, 5001, 5002]", result.stderr
    else:
        assert result.stdout.strip() != "[5000, 5001, 5002]", "the fake must scramble as the driver does"


@pytest.mark.parametrize("code", [UNKNOWN, NO_PERMISSION])
def test_a_failing_process_list_is_marked_unknown_and_the_agent_goes_on(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path, code: int) -> None:
    """Under nvidia-ml-py 12.535.77 (no NVMLLibraryMismatchError) the first NVML error in the process calls
    ended the agent with an AttributeError. Now the list is marked unknown, never sent as empty (item 6)."""
    state = state_with({"mem_used": 30 * GIB, "fail": {"processes": code},
                        "processes": [{"pid": 4001, "mem": 30 * GIB}]})
    result = run_agent(agent_cmd, fake_nvml_dir, fakelib.write_state(tmp_path / "state", state),
                       "--max-frames", "3", "--interval", "0.05")
    assert result.returncode == 0, result.stderr.decode()
    snaps = [f for f in map(wire.decode, result.stdout.splitlines()) if isinstance(f, wire.Snapshot)]
    assert len(snaps) == 3
    name = "NVML_ERROR_UNKNOWN" if code == UNKNOWN else "NVML_ERROR_NO_PERMISSION"
    assert all(s.gpus[0].processes_error == name and s.gpus[0].processes == [] for s in snaps)
    assert all(s.gpus[0].error is None and s.gpus[0].memory_used == 30 * GIB for s in snaps)


# ------------------------------------------------------------------------------- 5: MIG as a non-root agent


@pytest.fixture
def as_nobody(fake_nvml_dir: Path) -> Iterator[tuple[tuple[str, ...], Path, Path]]:
    """(setpriv prefix, library dir, a folder for the state) the unprivileged user ``nobody`` can read."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the agent as an unprivileged user")
    nobody = pwd.getpwnam("nobody")
    home = Path(tempfile.mkdtemp(prefix="gf-nvml-", dir="/tmp"))
    home.chmod(0o755)
    lib = home / "lib"
    shutil.copytree(fake_nvml_dir, lib)
    for p in [lib, *lib.iterdir()]:
        p.chmod(0o755)
    prefix = ("setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
              "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--")
    try:
        yield prefix, lib, home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def mig_state() -> dict[str, Any]:
    return state_with({
        "mig": 1, "util": 50, "sm_active": 40, "tensor_active": 20,
        "mig_instances": [
            {"gi": 1, "ci": 0, "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "uuid": "MIG-aaaa",
             "mem_total": 40 * GIB, "mem_used": 5 * GIB},
            {"gi": 2, "ci": 0, "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "uuid": "MIG-bbbb",
             "mem_total": 10 * GIB, "mem_used": 2 * GIB},
        ],
        "processes": [{"pid": 4101, "mem": 5 * GIB, "gi": 1, "ci": 0, "sm": 50},
                      {"pid": 4102, "mem": 2 * GIB, "gi": 2, "ci": 0}],
    })


def test_mig_processes_per_instance_as_an_unprivileged_agent(
        agent_cmd: list[str], as_nobody: tuple[tuple[str, ...], Path, Path]) -> None:
    """In MIG mode NVML gives the parent's process list only to privileged callers; per-instance lists come
    from the MIG device handles (NVML API reference, nvmlDeviceGetComputeRunningProcesses_v3). The parent
    has no utilization or per-process utilization in MIG mode (nvitop issue #5)."""
    prefix, lib, home = as_nobody
    state = fakelib.write_state(home / "state", mig_state())
    state.chmod(0o644)
    snap = run_once(agent_cmd, lib, state, prefix=prefix)
    g = snap.gpus[0]
    assert g.error is None and g.processes_error is None and g.util_gpu is None
    assert [(p.pid, p.gpu_memory, p.gi_id, p.ci_id, p.sm_util) for p in g.processes] == [
        (4101, 5 * GIB, 1, 0, None), (4102, 2 * GIB, 2, 0, None)]
    assert [(m.gi_id, m.ci_id, m.uuid, m.profile, m.memory_used) for m in g.mig_instances] == [
        (1, 0, "MIG-aaaa", "3g.40gb", 5 * GIB), (2, 0, "MIG-bbbb", "1g.10gb", 2 * GIB)]


def test_mig_gpm_is_sampled_per_gpu_instance(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """GPM on a MIG GPU needs nvmlGpmMigSampleGet per GPU instance (NVML API reference, "GPM")."""
    path = fakelib.write_state(tmp_path / "state", mig_state())
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        snap = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.seq == 2)[-1]
    assert isinstance(snap, wire.Snapshot)
    assert [m.sm_active for m in snap.gpus[0].mig_instances] == [40, 40]


# ------------------------------------------------------------------------------- 7: TemperatureV


@pytest.mark.parametrize("omit", ["nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"])
def test_temperature_is_read_with_or_without_the_deprecated_call(
        agent_cmd: list[str], fake_nvml_build: Callable[..., Path], tmp_path: Path, omit: str) -> None:
    """nvmlDeviceGetTemperature is deprecated and goes with CUDA 14 (nvidia-ml-py 13.615's own comment);
    nvmlDeviceGetTemperatureV is missing from older drivers and from nvidia-ml-py 12.535.77's module."""
    snap = once(agent_cmd, fake_nvml_build(omit=[omit]), tmp_path, state_with({"temp": 71}))
    assert snap.gpus[0].temperature == 71


# ------------------------------------------------------------------------ 8: a GPU the agent may not open


def test_a_gpu_the_agent_may_not_open_is_unreadable_not_lost(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """NO_PERMISSION from the handle call (a device cgroup, a restricted /dev/nvidiaN;
    nvidia-container-toolkit issue #842) says nothing about the GPU's health."""
    state = state_with({"util": 20}, {"fail": {"handle": NO_PERMISSION}})
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        frames = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.seq == 3)
    assert not [f for f in frames if isinstance(f, wire.Event)]
    snap = frames[-1]
    assert isinstance(snap, wire.Snapshot)
    assert snap.gpus[0].util_gpu == 20 and snap.gpus[1].fault == "unreadable"
    assert "NVML_ERROR_NO_PERMISSION" in (snap.gpus[1].error or "")


# ------------------------------------------------------------------------------- 9: a read that hangs


def test_a_hung_read_marks_its_gpu_and_the_others_keep_being_sampled(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """After some Xids an NVML call blocks in D state; inline, it stalled every GPU while heartbeats kept the
    host looking healthy."""
    state = state_with({"util": 20}, {"util": 70})
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.2", "--hang-after", "0.5") as stream:
        stream.until(lambda f: isinstance(f, wire.Snapshot))
        state["gpus"][1]["hang"] = 1
        fakelib.write_state(path, state)
        hung = stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "gpu_hung")[-1]
        assert isinstance(hung, wire.Event) and hung.gpu_index == 1
        later = [f for f in stream.until(lambda f: isinstance(f, wire.Snapshot) and f.gpus[1].fault == "hung",
                                         limit=50)]
        started = time.monotonic()
        more = [f for f in stream.until(lambda f: isinstance(f, wire.Snapshot), limit=10)]
        assert time.monotonic() - started < 2.0, "snapshots keep their pace while GPU 1 hangs"
        for snap in [f for f in later + more if isinstance(f, wire.Snapshot)][-2:]:
            assert snap.gpus[0].util_gpu == 20 and snap.gpus[0].error is None
            assert snap.gpus[1].fault == "hung" and "has not returned" in (snap.gpus[1].error or "")
        state["gpus"][1]["hang"] = 0
        fakelib.write_state(path, state)
        back = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.gpus[1].error is None, limit=50)[-1]
        assert isinstance(back, wire.Snapshot) and back.gpus[1].util_gpu == 70
        assert len([f for f in later + more if isinstance(f, wire.Event) and f.kind == "gpu_hung"]) == 0


# ------------------------------------------------------------------------------------ 10: MPS clients


def test_mps_clients_are_listed(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """Under MPS the compute list shows only nvidia-cuda-mps-server; the clients are in
    nvmlDeviceGetMPSComputeRunningProcesses (NVML API reference)."""
    procs = [{"pid": 4200, "mem": GIB}, {"pid": 4201, "mem": 3 * GIB, "type": "mps"},
             {"pid": 4202, "mem": 2 * GIB, "type": "mps"}]
    snap = once(agent_cmd, fake_nvml_dir, tmp_path, state_with({"processes": procs}))
    assert [(p.pid, p.kind, p.gpu_memory) for p in snap.gpus[0].processes] == [
        (4200, "compute", GIB), (4201, "mps", 3 * GIB), (4202, "mps", 2 * GIB)]


# ---------------------------------------------------------------------- 11: one lost GPU and the event set


def test_xids_of_other_gpus_arrive_while_one_gpu_is_lost(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """nvmlEventSetWait answers GPU_IS_LOST while a registered GPU is lost (NVML API reference): waiting on
    the same set again never delivered another GPU's Xid."""
    state = state_with({}, {})
    path = fakelib.write_state(tmp_path / "state", state)
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.2") as stream:
        stream.until(lambda f: isinstance(f, wire.Snapshot))
        state["gpus"][1]["lost"] = True
        fakelib.write_state(path, state)
        stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "gpu_lost")
        time.sleep(1.5)  # the watcher meets GPU_IS_LOST
        state["xids"] = [(0, 48)]
        fakelib.write_state(path, state)
        xid = stream.until(lambda f: isinstance(f, wire.Event) and f.kind == "xid", limit=60)[-1]
    assert isinstance(xid, wire.Event) and (xid.xid, xid.gpu_index) == (48, 0)


# ------------------------------------------------------------------------- 12: health NVML has


def test_health_fields_travel(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """Row remapping and the recovery action (NVIDIA "GPU Memory Error Management: Error Recovery and Response
    Flags"), HBM temperature (NVML_FI_DEV_MEMORY_TEMP) and the energy counter."""
    state = state_with({"temp_hbm": 64, "recovery_action": 1, "remap_corr": 2, "remap_unc": 1,
                        "remap_pending": 1, "remap_failed": 0, "energy_mj": 123_456_789}, {})
    snap = once(agent_cmd, fake_nvml_dir, tmp_path, state)
    g, plain = snap.gpus
    assert (g.memory_temperature, g.recovery_action, g.energy_mj) == (64, "gpu_reset", 123_456_789)
    remap = (g.remapped_correctable, g.remapped_uncorrectable, g.remap_pending, g.remap_failed)
    assert remap == (2, 1, True, False)
    assert plain.recovery_action is None and plain.remap_pending is None and plain.read_errors is None


def test_gpm_tensor_and_dram_activity_travel(
        agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    """What NVIDIA's dashboard plots as DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DRAM_ACTIVE, from GPM."""
    path = fakelib.write_state(tmp_path / "state",
                               state_with({"sm_active": 80, "tensor_active": 55, "dram_active": 30}))
    with streaming(agent_cmd, fake_nvml_dir, path, "--interval", "0.1") as stream:
        snap = stream.until(lambda f: isinstance(f, wire.Snapshot) and f.seq == 2)[-1]
    assert isinstance(snap, wire.Snapshot)
    g = snap.gpus[0]
    assert (g.sm_active, g.tensor_active, g.dram_active, g.gr_active) == (80, 55, 30, 80)
