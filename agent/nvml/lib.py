"""pynvml with the calls that differ between nvidia-ml-py releases made the same on every release.

The agent supports nvidia-ml-py from 12.535.77 to the newest 13.x and every driver in the field; a few calls
behave differently depending on which pair meets (issue 32, item 3):

- **Process lists.** ``nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses_v3`` writes the struct
  *the driver* was built with, not the one the Python package declares. r535 drivers write 32 bytes
  (``usedGpuCcProtectedMemory`` appended), later ones 24 again; nvidia-ml-py 12.535.77 declares 32 and
  13.x declares 24, so the wrong pair scrambles pids and memory (nvitop issue #75 and PR #79, gpustat
  issue #161, gpuopenanalytics/pynvml issue #50). Like nvitop (``api/libnvml.py``), the layout is picked
  from the driver's own symbols: ``_v3`` with ``nvmlDeviceGetConfComputeMemSizeInfo`` and without
  ``nvmlDeviceGetRunningProcessDetailList`` is the r535 layout; otherwise 24 bytes; ``_v2`` (24 bytes) and
  the unversioned v1 (16 bytes) on older drivers.
- **Temperature.** ``nvmlDeviceGetTemperature`` is deprecated and goes with CUDA 14 (nvidia-ml-py 13.615's
  own comment); ``nvmlDeviceGetTemperatureV`` is missing from 12.535.77's module. Called here through the
  library itself, so it works with either.
- **Exceptions.** 12.535.77 has no ``NVMLLibraryMismatchError``: :data:`LibraryMismatch` is the class when
  the module has it and a never-raised stand-in otherwise, so an ``except`` naming it cannot fail.

Everything else is the module's own function, looked up by name (:meth:`NvmlLib.__getattr__`).
"""

from __future__ import annotations

import ctypes
from typing import Any, Final

import pynvml
from gpufleet.agent.nvml import codes


class _NeverRaised(Exception):
    """Stands in for an exception class the installed nvidia-ml-py does not define."""


LibraryMismatch: Final[type[Exception]] = getattr(pynvml, "NVMLLibraryMismatchError", _NeverRaised)


class ProcessInfo:
    """One row of a running-process list, whatever struct layout the driver wrote it in."""

    __slots__ = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")

    def __init__(self, pid: int, used: int | None, gi: int, ci: int) -> None:
        self.pid = pid
        self.usedGpuMemory = used  # bytes; None where the driver cannot tell (WDDM)
        self.gpuInstanceId = gi  # codes.NO_INSTANCE outside MIG
        self.computeInstanceId = ci


class _ProcV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _ProcV2(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _ProcR535(ctypes.Structure):
    _fields_ = [*_ProcV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


class _TemperatureV1(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("sensorType", ctypes.c_int), ("temperature", ctypes.c_int)]


#: (symbol suffix, struct) per layout, as :meth:`NvmlLib.process_layout` names them.
_LAYOUTS: Final[dict[str, tuple[str, type[ctypes.Structure]]]] = {
    "v3-r535": ("_v3", _ProcR535),
    "v3": ("_v3", _ProcV2),
    "v2": ("_v2", _ProcV2),
    "v1": ("", _ProcV1),
}


class NvmlLib:
    """The NVML library object the gateway talks to on real hardware (the fake backend is the other one)."""

    def __init__(self, module: Any = pynvml) -> None:
        self._module = module
        self._layout: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def _has(self, symbol: str) -> bool:
        try:
            self._module._nvmlGetFunctionPointer(symbol)
        except pynvml.NVMLError as exc:
            if int(exc.value) == codes.FUNCTION_NOT_FOUND:
                return False
            raise
        return True

    def _fn(self, symbol: str) -> Any:
        return self._module._nvmlGetFunctionPointer(symbol)

    def process_layout(self) -> str:
        """Which process-info layout this driver writes: "v3-r535" (32 bytes), "v3", "v2" or "v1"."""
        if self._layout is None:
            if self._has("nvmlDeviceGetComputeRunningProcesses_v3"):
                r535 = self._has("nvmlDeviceGetConfComputeMemSizeInfo") and not self._has(
                    "nvmlDeviceGetRunningProcessDetailList")
                self._layout = "v3-r535" if r535 else "v3"
            elif self._has("nvmlDeviceGetComputeRunningProcesses_v2"):
                self._layout = "v2"
            else:
                self._layout = "v1"
        return self._layout

    def _running(self, base: str, handle: Any) -> list[ProcessInfo]:
        """The probe-then-fetch protocol every NVML list call shares: count 0 answers SUCCESS (none) or
        INSUFFICIENT_SIZE with the count; the second call gets room for more, as processes come and go."""
        suffix, struct = _LAYOUTS[self.process_layout()]
        fn = self._fn(base + suffix)
        count = ctypes.c_uint(0)
        rc = fn(handle, ctypes.byref(count), None)
        if rc == codes.SUCCESS:
            return []
        if rc != codes.INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(rc)
        count.value = count.value * 2 + 5
        rows = (struct * count.value)()
        rc = fn(handle, ctypes.byref(count), rows)
        if rc != codes.SUCCESS:
            raise pynvml.NVMLError(rc)
        out: list[ProcessInfo] = []
        for row in rows[: count.value]:
            used = int(row.usedGpuMemory)
            out.append(ProcessInfo(
                int(row.pid), None if used == codes.VALUE_NOT_AVAILABLE else used,
                int(getattr(row, "gpuInstanceId", codes.NO_INSTANCE)),
                int(getattr(row, "computeInstanceId", codes.NO_INSTANCE))))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[ProcessInfo]:
        return self._running("nvmlDeviceGetComputeRunningProcesses", handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[ProcessInfo]:
        return self._running("nvmlDeviceGetGraphicsRunningProcesses", handle)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[ProcessInfo]:
        """MPS clients (the compute list shows only the MPS server, nvidia-cuda-mps-server)."""
        return self._running("nvmlDeviceGetMPSComputeRunningProcesses", handle)

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:
        """Raises NVMLError(FUNCTION_NOT_FOUND) on drivers without it (the caller then uses the old call)."""
        value = _TemperatureV1(version=codes.TEMPERATURE_V1, sensorType=sensor)
        rc = self._fn("nvmlDeviceGetTemperatureV")(handle, ctypes.byref(value))
        if rc != codes.SUCCESS:
            raise pynvml.NVMLError(rc)
        return int(value.temperature)
