"""Read everything through the real pynvml and print it as JSON (run in a subprocess by the tests).

Each reading is its value, or ``{"error": "<NVMLError subclass name>"}``, so a test can assert both the
values and the exact error class in one run. Usage: ``python probe.py [--events MS]``.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Callable
from typing import Any

import pynvml as N


def q(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        value = fn(*args)
    except (N.NVMLError, getattr(N, "NVMLLibraryMismatchError", N.NVMLError)) as exc:
        return {"error": type(exc).__name__}
    return plain(value)


def plain(value: Any) -> Any:
    """ctypes structs and pynvml's friendly objects to JSON-able dicts."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "_fields_"):
        fields = {name: getattr(value, name) for name, *_ in value._fields_}
        return {k: plain(v) for k, v in fields.items() if not isinstance(v, ctypes._Pointer)}
    if isinstance(value, N.nvmlFriendlyObject):
        return {k: plain(v) for k, v in vars(value).items()}
    return value


def mig_devices(h: Any) -> Any:
    count = N.nvmlDeviceGetMaxMigDeviceCount(h)
    out = []
    for i in range(count):
        try:
            m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except N.NVMLError_NotFound:
            continue
        out.append(
            {
                "gi": q(N.nvmlDeviceGetGpuInstanceId, m),
                "ci": q(N.nvmlDeviceGetComputeInstanceId, m),
                "name": q(N.nvmlDeviceGetName, m),
                "uuid": q(N.nvmlDeviceGetUUID, m),
                "mem_v2": q(N.nvmlDeviceGetMemoryInfo, m, N.nvmlMemory_v2),
                "util": q(N.nvmlDeviceGetUtilizationRates, m),
            }
        )
    return out


def gpu(h: Any) -> dict[str, Any]:
    return {
        "name": q(N.nvmlDeviceGetName, h),
        "uuid": q(N.nvmlDeviceGetUUID, h),
        "serial": q(N.nvmlDeviceGetSerial, h),
        "index": q(N.nvmlDeviceGetIndex, h),
        "pci": q(N.nvmlDeviceGetPciInfo, h),
        "util": q(N.nvmlDeviceGetUtilizationRates, h),
        "mem_v1": q(N.nvmlDeviceGetMemoryInfo, h),
        "mem_v2": q(N.nvmlDeviceGetMemoryInfo, h, N.nvmlMemory_v2),
        "temp": q(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU),
        "temp_v": q(N.nvmlDeviceGetTemperatureV, h, N.NVML_TEMPERATURE_GPU),
        "thresholds": [q(N.nvmlDeviceGetTemperatureThreshold, h, t) for t in range(4)],
        "power": q(N.nvmlDeviceGetPowerUsage, h),
        "power_limit": q(N.nvmlDeviceGetEnforcedPowerLimit, h),
        "clocks": [q(N.nvmlDeviceGetClockInfo, h, c) for c in range(4)],
        "event_reasons": q(N.nvmlDeviceGetCurrentClocksEventReasons, h),
        "throttle_reasons": q(N.nvmlDeviceGetCurrentClocksThrottleReasons, h),
        "fan": q(N.nvmlDeviceGetFanSpeed, h),
        "ecc": [q(N.nvmlDeviceGetTotalEccErrors, h, e, c) for c in (0, 1) for e in (0, 1)],
        "mig_mode": q(N.nvmlDeviceGetMigMode, h),
        "mig_max": q(N.nvmlDeviceGetMaxMigDeviceCount, h),
        "migs": q(mig_devices, h),
        "compute": q(N.nvmlDeviceGetComputeRunningProcesses_v3, h),
        "compute_v2": q(N.nvmlDeviceGetComputeRunningProcesses_v2, h),
        "compute_unversioned": q(N.nvmlDeviceGetComputeRunningProcesses, h),
        "graphics": q(N.nvmlDeviceGetGraphicsRunningProcesses, h),
        "proc_util": q(N.nvmlDeviceGetProcessUtilization, h, 0),
        "event_types": q(N.nvmlDeviceGetSupportedEventTypes, h),
    }


def events(handles: list[Any], wait_ms: int) -> Any:
    """Register Xid events on every GPU and collect what arrives until a wait times out."""
    es = N.nvmlEventSetCreate()
    for h in handles:
        try:
            N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
        except N.NVMLError:
            pass
    got = []
    while True:
        try:
            data = N.nvmlEventSetWait_v2(es, wait_ms)
        except N.NVMLError_Timeout:
            break
        got.append({"uuid": N.nvmlDeviceGetUUID(data.device), "type": data.eventType, "xid": data.eventData})
    N.nvmlEventSetFree(es)
    return got


def main(argv: list[str]) -> int:
    N.nvmlInit()
    count = N.nvmlDeviceGetCount()
    handles: list[Any] = []
    gpus: list[dict[str, Any]] = []
    for i in range(count):
        try:
            handles.append(N.nvmlDeviceGetHandleByIndex(i))
        except N.NVMLError as exc:
            gpus.append({"handle": {"error": type(exc).__name__}})
        else:
            gpus.append(gpu(handles[-1]))
    out: dict[str, Any] = {
        "driver": q(N.nvmlSystemGetDriverVersion),
        "nvml": q(N.nvmlSystemGetNVMLVersion),
        "cuda": q(N.nvmlSystemGetCudaDriverVersion),
        "count": count,
        "error_string": plain(N.nvmlErrorString(N.NVML_ERROR_GPU_IS_LOST)),
        "gpus": gpus,
    }
    if "--events" in argv:
        out["events"] = q(events, handles, int(argv[argv.index("--events") + 1]))
    N.nvmlShutdown()
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
