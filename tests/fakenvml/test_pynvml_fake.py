"""The fake libnvidia-ml.so.1 as the real pynvml sees it (always in a subprocess: LD_LIBRARY_PATH)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.fakenvml import fakelib

if not hasattr(pynvml, "nvmlDeviceGetTemperatureV"):
    pytest.skip("this file checks the fake library through nvidia-ml-py 13.x's own wrappers (their names and "
                "struct layouts); under 12.535.77 the agent's tests run instead", allow_module_level=True)

PROBE = Path(__file__).with_name("probe.py")
GIB = 1 << 30


def probe(lib_dir: Path, state: Path, *args: str) -> dict[str, Any]:
    env = fakelib.env_for(lib_dir, state)
    result = subprocess.run(
        [sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def run_py(lib_dir: Path, state: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = fakelib.env_for(lib_dir, state)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def err(name: str) -> dict[str, str]:
    return {"error": f"NVMLError_{name}"}


def full_state() -> dict[str, Any]:
    state = fakelib.default_state(2)
    g0, g1 = state["gpus"]
    g0.update(
        util=37,
        util_mem=12,
        mem_used=30 * GIB,
        mem_reserved=512 << 20,
        temp=71,
        power_mw=312_500,
        clock_graphics=1410,
        clock_sm=1410,
        clock_mem=1593,
        clock_video=1275,
        throttle=0x4 | 0x20,
        fan=55,
        ecc_corrected=3,
        ecc_uncorrected=1,
        ecc_agg_corrected=40,
        ecc_agg_uncorrected=2,
        processes=[
            {"pid": 4242, "mem": GIB, "sm": 12, "memutil": 5, "enc": 1, "dec": 2},
            {"pid": 4243, "mem": 2 * GIB, "sm": 150},  # clamping is the agent's job: passed through
            {"pid": 4244, "mem": None, "type": "graphics"},  # NVML_VALUE_NOT_AVAILABLE
            {"pid": 4245, "mem": 3 * GIB, "type": "both"},
        ],
    )
    g1.update(
        name="NVIDIA H100 80GB HBM3",
        mig=1,
        mig_pending=0,
        mig_instances=[
            {
                "gi": 1,
                "ci": 0,
                "uuid": "MIG-aaaa",
                "name": "NVIDIA H100 3g.40gb",
                "mem_total": 40 * GIB,
                "mem_used": GIB,
            },
            {
                "gi": 2,
                "ci": 0,
                "uuid": "MIG-bbbb",
                "name": "NVIDIA H100 3g.40gb",
                "mem_total": 40 * GIB,
                "mem_used": 0,
            },
        ],
        processes=[{"pid": 77, "mem": GIB, "gi": 1, "ci": 0}],
    )
    state["xids"] = [(1, 79), (0, 13)]
    return state


def test_every_value_reads_back(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = full_state()
    path = fakelib.write_state(tmp_path / "state", state)
    out = probe(fake_nvml_dir, path, "--events", "30")

    assert out["driver"] == "550.54.15" and out["nvml"] == "12.550.54.15" and out["cuda"] == 12040
    assert out["count"] == 2
    assert out["error_string"] == "GPU is lost"
    g0, g1 = out["gpus"]
    assert g0["name"] == "NVIDIA A100-SXM4-80GB" and g1["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["uuid"] == state["gpus"][0]["uuid"] and g1["uuid"] == state["gpus"][1]["uuid"]
    assert g0["serial"] == "1321021000000" and g1["index"] == 1
    assert g0["pci"] == {
        "busIdLegacy": "0000:07:00.0",
        "domain": 0,
        "bus": 7,
        "device": 0,
        "pciDeviceId": 0x20B210DE,
        "pciSubSystemId": 0x147F10DE,
        "busId": "00000000:07:00.0",
    }
    assert g0["util"] == {"gpu": 37, "memory": 12}
    total, used, reserved = 80 * GIB, 30 * GIB, 512 << 20
    assert g0["mem_v2"] == {
        "version": 0x02000028,
        "total": total,
        "reserved": reserved,
        "free": total - used - reserved,
        "used": used,
    }
    # v1 counts reserved memory as used, as real drivers do
    assert g0["mem_v1"] == {"total": total, "free": total - used - reserved, "used": used + reserved}
    assert g0["temp"] == 71 and g0["temp_v"] == 71
    assert g0["thresholds"] == [92, 89, 95, 87]
    assert g0["power"] == 312_500 and g0["power_limit"] == 400_000
    assert g0["clocks"] == [1410, 1410, 1593, 1275]
    assert g0["event_reasons"] == g0["throttle_reasons"] == 0x24
    assert g0["fan"] == 55
    assert g0["ecc"] == [3, 1, 40, 2]  # volatile corrected, uncorrected, aggregate corrected, uncorrected
    assert g0["mig_mode"] == [0, 0] and g0["migs"] == []
    assert g0["event_types"] == 0x1F

    na = 0xFFFFFFFF
    compute = [
        {"pid": 4242, "usedGpuMemory": GIB, "gpuInstanceId": na, "computeInstanceId": na},
        {"pid": 4243, "usedGpuMemory": 2 * GIB, "gpuInstanceId": na, "computeInstanceId": na},
        {"pid": 4245, "usedGpuMemory": 3 * GIB, "gpuInstanceId": na, "computeInstanceId": na},
    ]
    assert g0["compute"] == g0["compute_v2"] == g0["compute_unversioned"] == compute
    assert g0["graphics"] == [
        {"pid": 4244, "usedGpuMemory": None, "gpuInstanceId": na, "computeInstanceId": na},
        {"pid": 4245, "usedGpuMemory": 3 * GIB, "gpuInstanceId": na, "computeInstanceId": na},
    ]
    samples = g0["proc_util"]
    assert [(s["pid"], s["smUtil"], s["memUtil"], s["encUtil"], s["decUtil"]) for s in samples] == [
        (4242, 12, 5, 1, 2),
        (4243, 150, 0, 0, 0),
    ]
    assert all(s["timeStamp"] > 0 for s in samples)

    assert g1["mig_mode"] == [1, 0] and g1["mig_max"] == 7
    assert g1["migs"] == [
        {
            "gi": 1,
            "ci": 0,
            "name": "NVIDIA H100 3g.40gb",
            "uuid": "MIG-aaaa",
            "util": err("NotSupported"),
            "mem_v2": {
                "version": 0x02000028,
                "total": 40 * GIB,
                "reserved": 0,
                "free": 39 * GIB,
                "used": GIB,
            },
        },
        {
            "gi": 2,
            "ci": 0,
            "name": "NVIDIA H100 3g.40gb",
            "uuid": "MIG-bbbb",
            "util": err("NotSupported"),
            "mem_v2": {"version": 0x02000028, "total": 40 * GIB, "reserved": 0, "free": 40 * GIB, "used": 0},
        },
    ]
    assert g1["compute"] == [{"pid": 77, "usedGpuMemory": GIB, "gpuInstanceId": 1, "computeInstanceId": 0}]
    # the parent of a MIG GPU has no per-process utilization (nvitop issue #5, NVML API reference)
    assert g1["graphics"] == [] and g1["proc_util"] == err("NotSupported")

    assert out["events"] == [
        {"uuid": g1["uuid"], "type": 8, "xid": 79},
        {"uuid": g0["uuid"], "type": 8, "xid": 13},
    ]


def test_unsupported_and_denied_fields_raise_while_the_rest_read(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = fakelib.default_state(1)
    state["gpus"][0].update(
        unsupported=["temperature", "fan", "ecc", "mig", "process_util"],
        noperm=["power"],
        fail={"clocks": 999},
        serial=None,
        temp_mem_max=None,
        mem_used=5 * GIB,
    )
    path = fakelib.write_state(tmp_path / "state", state)
    g = probe(fake_nvml_dir, path)["gpus"][0]

    assert g["temp"] == g["temp_v"] == g["fan"] == err("NotSupported")
    assert g["ecc"] == [err("NotSupported")] * 4
    assert g["mig_mode"] == g["mig_max"] == g["migs"] == err("NotSupported")
    assert g["proc_util"] == err("NotSupported")
    assert g["power"] == err("NoPermission")
    assert g["clocks"] == [err("Unknown")] * 4
    assert g["serial"] == err("NotSupported")  # absent key: not supported
    assert g["thresholds"] == [92, 89, err("NotSupported"), 87]
    # everything else still answers
    assert g["name"] == "NVIDIA A100-SXM4-80GB" and g["power_limit"] == 400_000
    assert g["mem_v2"]["used"] == 5 * GIB and g["util"] == {"gpu": 0, "memory": 0}
    assert g["compute"] == []


def test_omitted_symbols_raise_function_not_found(
    fake_nvml_build: Callable[..., Path], tmp_path: Path
) -> None:
    omit = (
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetTemperatureV",
    )
    lib_dir = fake_nvml_build(omit)
    state = fakelib.default_state(1)
    state["gpus"][0]["processes"] = [{"pid": 9, "mem": GIB}]
    path = fakelib.write_state(tmp_path / "state", state)
    g = probe(lib_dir, path)["gpus"][0]

    missing = err("FunctionNotFound")
    assert g["fan"] == g["event_reasons"] == g["mem_v2"] == g["temp_v"] == g["compute"] == missing
    # pynvml's unversioned wrapper turns a missing _v3 into its own mismatch error, not an NVMLError
    assert g["compute_unversioned"] == {"error": "NVMLLibraryMismatchError"}
    # the fallbacks an old driver still has keep working
    assert g["throttle_reasons"] == 0x1 and g["temp"] == 33
    assert g["mem_v1"]["total"] == 80 * GIB
    assert [p["pid"] for p in g["compute_v2"]] == [9]


def test_unknown_omit_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(fakelib.FakeNvmlError, match="nvmlDeviceGetFanSpeeed"):
        fakelib.build(tmp_path, omit=["nvmlDeviceGetFanSpeeed"])


def test_lost_gpu_fails_every_call_and_others_still_answer(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = fakelib.default_state(2)
    state["gpus"][0]["lost"] = True
    path = fakelib.write_state(tmp_path / "state", state)
    g0, g1 = probe(fake_nvml_dir, path)["gpus"]
    # nvidia-smi after an Xid 79: "Unable to determine the device handle for GPU ...: GPU is lost"
    assert g0 == {"handle": err("GpuIsLost")}
    assert g1["name"] == "NVIDIA A100-SXM4-80GB" and g1["util"] == {"gpu": 0, "memory": 0}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (None, "NVMLError_DriverNotLoaded"),  # no state file at all: no driver
        ({"init_error": 18}, "NVMLError_LibRmVersionMismatch"),
    ],
)
def test_init_failures(
    fake_nvml_dir: Path, tmp_path: Path, state: dict[str, Any] | None, expected: str
) -> None:
    path = tmp_path / "state"
    if state is not None:
        fakelib.write_state(path, {**fakelib.default_state(1), **state})
    code = "import pynvml as N\ntry:\n    N.nvmlInit()\nexcept N.NVMLError as e:\n    print(type(e).__name__)"
    result = run_py(fake_nvml_dir, path, code)
    assert result.stdout.strip() == expected, result.stderr


def test_c_level_contracts(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """What pynvml hides: buffer sizes, the process probes, version fields, calls before init."""
    state = fakelib.default_state(1)
    state["gpus"][0]["processes"] = [{"pid": 1, "mem": GIB, "sm": 3}, {"pid": 2, "mem": GIB, "sm": 4}]
    path = fakelib.write_state(tmp_path / "state", state)
    code = """
import ctypes, pynvml as N
print(N.nvmlLib is None)
N._LoadNvmlLibrary()
lib = N.nvmlLib
c = ctypes.c_uint(0)
print(lib.nvmlDeviceGetCount_v2(ctypes.byref(c)))  # before init
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
buf = ctypes.create_string_buffer(8)
print(lib.nvmlDeviceGetName(h, buf, 8), lib.nvmlDeviceGetName(h, buf, 0))
big = ctypes.create_string_buffer(96)
print(lib.nvmlDeviceGetName(h, big, 22), big.value.decode())
c = ctypes.c_uint(0)
print(lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(c), None), c.value)
c = ctypes.c_uint(0)
print(lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(c), ctypes.c_ulonglong(0)), c.value)
c = ctypes.c_uint(0)
print(lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(c), ctypes.c_ulonglong(2**63)))
m = N.c_nvmlMemory_v2_t(); m.version = 1
print(lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m)))
bogus = N.c_nvmlDevice_t(N.struct_c_nvmlDevice_t())
print(lib.nvmlDeviceGetUtilizationRates(bogus, ctypes.byref(N.c_nvmlUtilization_t())))
print(lib.nvmlDeviceGetHandleByIndex_v2(5, ctypes.byref(N.c_nvmlDevice_t())))
N.nvmlShutdown()
print(lib.nvmlDeviceGetName(h, big, 96))
"""
    result = run_py(fake_nvml_dir, path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == [
        "True",
        "1",  # UNINITIALIZED
        "7 7",  # INSUFFICIENT_SIZE for a short buffer
        "0 NVIDIA A100-SXM4-80GB",  # exactly strlen + 1 fits
        "7 2",  # probe with count 0: INSUFFICIENT_SIZE and the count
        "7 2",
        "6",  # no sample newer than the last-seen timestamp: NOT_FOUND
        "25",  # wrong struct version: ARGUMENT_VERSION_MISMATCH
        "2",  # a pointer that is no handle: INVALID_ARGUMENT
        "2",
        "1",  # after shutdown: UNINITIALIZED
    ]


def test_state_changes_are_seen_by_a_running_process(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = fakelib.default_state(1)
    path = fakelib.write_state(tmp_path / "state", state)
    code = """
import sys, pynvml as N
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
es = N.nvmlEventSetCreate()
N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
def show():
    u = N.nvmlDeviceGetUtilizationRates(h).gpu
    procs = [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
    try:
        xid = N.nvmlEventSetWait(es, 50).eventData
    except N.NVMLError_Timeout:
        xid = None
    print(u, procs, xid, N.nvmlDeviceGetCount(), flush=True)
show()
for line in sys.stdin:
    show()
"""
    env = fakelib.env_for(fake_nvml_dir, path)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        lines = [proc.stdout.readline().strip()]
        state["gpus"][0].update(util=88, processes=[{"pid": 31337, "mem": GIB}])
        state["xids"] = [(0, 48)]
        fakelib.write_state(path, state)
        for _ in range(2):  # the Xid is delivered once, even though the file still lists it
            proc.stdin.write("next\n")
            proc.stdin.flush()
            lines.append(proc.stdout.readline().strip())
        state["gpus"].append(fakelib.default_gpu(1))
        state["xids"].append((0, 79))
        fakelib.write_state(path, state)
        proc.stdin.write("next\n")
        proc.stdin.flush()
        lines.append(proc.stdout.readline().strip())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert lines == ["0 [] None 1", "88 [31337] 48 1", "88 [31337] None 1", "88 [31337] 79 2"]


def test_an_event_wait_blocks_until_the_state_changes(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """As the driver's does: a wait with nothing to report sleeps in the kernel (a handful of context
    switches in a second, not one per poll), and an Xid written during the wait wakes it at once."""
    state = fakelib.default_state(1)
    path = fakelib.write_state(tmp_path / "state", state)
    code = """
import sys, threading, time, pynvml as N
N.nvmlInit()
es = N.nvmlEventSetCreate()
N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(0), N.nvmlEventTypeXidCriticalError, es)
def switches():
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        return int(f.read().split("voluntary_ctxt_switches:")[1].split()[0])
before = switches()
try:
    N.nvmlEventSetWait(es, 1000)
except N.NVMLError_Timeout:
    pass
print(switches() - before, flush=True)
sys.stdin.readline()
start = time.monotonic()
xid = N.nvmlEventSetWait(es, 20000).eventData
print(xid, round(time.monotonic() - start, 1), flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env=fakelib.env_for(fake_nvml_dir, path),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        idle_switches = int(proc.stdout.readline())
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(0.5)  # the process is in its 20 s wait by now
        state["xids"] = [(0, 79)]
        fakelib.write_state(path, state)
        xid, waited = proc.stdout.readline().split()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert idle_switches <= 10, f"the wait woke {idle_switches} times in a second with nothing to report"
    assert int(xid) == 79 and float(waited) < 10.0


def test_render_state_rejects_unknown_keys() -> None:
    with pytest.raises(fakelib.FakeNvmlError, match="temperature"):
        fakelib.render_state({"gpus": [{"temperature": 3}]})
    with pytest.raises(fakelib.FakeNvmlError, match="unknown features"):
        fakelib.render_state({"gpus": [{"unsupported": ["fans"]}]})
