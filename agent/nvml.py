"""The NVML gateway: the only module that imports pynvml.

It talks to an *NVML library object*: the real ``pynvml`` module, or :class:`gpufleet.agent.fake.FakeNvml`,
which has the same function names and signatures and raises real ``pynvml.NVMLError`` instances. Either way
the same code below maps errors, so the fake backend exercises exactly what runs on hardware.

One method per concern. Error mapping (from the operators' tools):
- field missing (NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, DEPRECATED, NOT_FOUND, ...) -> None
  for that field only;
- device gone (GPU_IS_LOST, UNKNOWN, RESET_REQUIRED) -> :class:`GpuLostError` (the sampler reports
  that GPU as an error entry and goes on with the others);
- driver gone (UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH) -> :class:`DriverError`
  (the agent re-initialises NVML with backoff).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pynvml
from gpufleet.agent.errors import DriverError, EventWaitError, GpuLostError, NvmlUnavailable
from gpufleet.agent.wire import MigInstance

log = logging.getLogger(__name__)

NVMLError: Final = pynvml.NVMLError

#: NVML error names without the prefix ("NOT_SUPPORTED") -> code; scenario files use these names.
ERROR_CODES: Final[dict[str, int]] = {
    name[len("NVML_ERROR_") :]: int(getattr(pynvml, name))
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_")
}
_ERROR_NAMES: Final = {code: f"NVML_ERROR_{name}" for name, code in ERROR_CODES.items()}


def _code(name: str, default: int = -1) -> int:
    return ERROR_CODES.get(name, default)


FIELD_MISSING: Final = frozenset(
    _code(n)
    for n in (
        "NOT_SUPPORTED",
        "NO_PERMISSION",
        "FUNCTION_NOT_FOUND",
        "DEPRECATED",
        "NOT_FOUND",
        "NO_DATA",
        "ARGUMENT_VERSION_MISMATCH",
    )
)
DEVICE_GONE: Final = frozenset(
    _code(n) for n in ("GPU_IS_LOST", "UNKNOWN", "RESET_REQUIRED", "GPU_NOT_FOUND")
)
DRIVER_GONE: Final = frozenset(
    _code(n) for n in ("UNINITIALIZED", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "LIBRARY_NOT_FOUND")
)

# Constants the fake backend interprets (re-exported so that only this module imports pynvml).
TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
THRESHOLD_SHUTDOWN: Final[int] = pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
THRESHOLD_SLOWDOWN: Final[int] = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
CLOCK_GRAPHICS: Final[int] = pynvml.NVML_CLOCK_GRAPHICS
CLOCK_SM: Final[int] = pynvml.NVML_CLOCK_SM
CLOCK_MEM: Final[int] = pynvml.NVML_CLOCK_MEM
ECC_CORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
ECC_UNCORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE_ECC: Final[int] = pynvml.NVML_VOLATILE_ECC
MEMORY_V2: Final[int] = pynvml.nvmlMemory_v2
EVENT_XID: Final[int] = pynvml.nvmlEventTypeXidCriticalError
MIG_ENABLE: Final[int] = pynvml.NVML_DEVICE_MIG_ENABLE
GPM_SM_UTIL: Final[int] = pynvml.NVML_GPM_METRIC_SM_UTIL  # percentage of SMs that were busy (Hopper+)

#: Clock event ("throttle") reason bits -> the names the wire protocol uses.
THROTTLE_REASONS: Final[dict[int, str]] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal",
    0x0040: "hw_thermal",
    0x0080: "hw_power_brake",
    0x0100: "display_clocks",
    0x0200: "board_limit",
    0x0400: "reliability",
}
THROTTLE_BITS: Final[dict[str, int]] = {name: bit for bit, name in THROTTLE_REASONS.items()}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"NVML error {code}")


def make_error(code: int) -> Exception:
    """A real ``pynvml.NVMLError`` (the right subclass) for ``code``: what the fake backend raises."""
    err: Exception = pynvml.NVMLError(code)
    return err


def library_mismatch(message: str) -> Exception:
    """What pynvml raises when an unversioned call finds no matching symbol (FUNCTION_NOT_FOUND)."""
    err: Exception = pynvml.NVMLLibraryMismatchError(message)
    return err


def new_gpm_sample() -> Any:
    """An opaque GPM sample pointer of pynvml's type (the fake backend's nvmlGpmSampleAlloc)."""
    return ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())


def decode_throttle(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def handle_key(handle: Any) -> int:
    """A stable key for a device handle, so an event's ``device`` can be matched to a GPU index."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    return id(handle)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


# --------------------------------------------------------------------------------------------- readings


@dataclass(slots=True)
class SystemInfo:
    driver_version: str | None
    nvml_version: str | None
    cuda_version: int | None


@dataclass(slots=True)
class MemoryReading:
    total: int | None
    used: int | None
    reserved: int | None  # None from the v1 call (which counts reserved memory as used)


@dataclass(slots=True)
class RawProcess:
    pid: int
    kind: str  # "compute" | "graphics" | "compute+graphics"
    used_memory: int | None  # bytes; None where the driver cannot tell (WDDM)


@dataclass(slots=True)
class ProcessUtil:
    """Per-pid utilization since the last call; ``last_ts`` is what to pass next time."""

    by_pid: dict[int, tuple[int, int]]  # pid -> (sm %, mem %), clamped 0..100, max over the window
    last_ts: int


@dataclass(slots=True)
class GpmState:
    """One GPU's two GPM sample buffers: GPM metrics are the difference between two samples, so each
    reading compares this interval's sample with the previous one (the first reading has none)."""

    prev: Any
    cur: Any
    primed: bool = False  # ``prev`` holds a sample


@dataclass(slots=True)
class XidReading:
    handle: Any
    event_type: int
    data: int  # the Xid for XidCriticalError events


# ----------------------------------------------------------------------------------------------- gateway


class Gateway:
    """Every NVML query the agent makes, with the error mapping described in the module docstring."""

    def __init__(self, lib: Any | None = None, backend: str | None = None) -> None:
        self.lib: Any = pynvml if lib is None else lib
        self.backend = backend or ("nvml" if lib is None else "fake")
        self._mem_v2 = True
        self._procs_v3: dict[str, bool] = {"compute": True, "graphics": True}
        self._reasons_fn = "nvmlDeviceGetCurrentClocksEventReasons"
        self._warned: set[tuple[str, int]] = set()

    # ------------------------------------------------------------------ error mapping

    def _fail(self, what: str, exc: Any) -> None:
        """Raise for device/driver loss; return (meaning: the field is None) otherwise."""
        code = int(getattr(exc, "value", -1))
        if code in DRIVER_GONE:
            raise DriverError(f"NVML driver error in {what}: {error_name(code)}", code)
        if code in DEVICE_GONE:
            raise GpuLostError(f"{error_name(code)} ({exc})", code)
        if code not in FIELD_MISSING and (what, code) not in self._warned:
            self._warned.add((what, code))
            log.warning("NVML %s failed with %s; reporting it as null", what, error_name(code))

    def _q(self, what: str, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.lib, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args, **kwargs)
        except pynvml.NVMLError as exc:
            self._fail(what, exc)
            return None
        except pynvml.NVMLLibraryMismatchError:
            return None

    # ------------------------------------------------------------------ lifecycle and system

    def init(self) -> None:
        """Initialise NVML. Raises :class:`NvmlUnavailable` with a message fit for one stderr line."""
        try:
            self.lib.nvmlInit()
        except pynvml.NVMLError as exc:
            code = int(exc.value)
            if code == _code("LIBRARY_NOT_FOUND"):
                why = "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
            elif code == _code("DRIVER_NOT_LOADED"):
                why = "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)"
            elif code == _code("LIB_RM_VERSION_MISMATCH"):
                why = (
                    "driver/library version mismatch (reboot or reload nvidia modules after a driver upgrade)"
                )
            elif code == _code("NO_PERMISSION"):
                why = "no permission to open the NVIDIA devices (NVML_ERROR_NO_PERMISSION)"
            else:
                why = f"nvmlInit failed: {error_name(code)}"
            raise NvmlUnavailable(f"NVML not available: {why}") from None

    def shutdown(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", error_name(int(exc.value)))

    def system_info(self) -> SystemInfo:
        cuda = self._q("cuda version", "nvmlSystemGetCudaDriverVersion")
        return SystemInfo(
            driver_version=_text(self._q("driver version", "nvmlSystemGetDriverVersion")),
            nvml_version=_text(self._q("NVML version", "nvmlSystemGetNVMLVersion")),
            cuda_version=None if cuda is None else int(cuda),
        )

    def device_count(self) -> int:
        try:
            return int(self.lib.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            self._fail("device count", exc)
            raise DriverError(
                f"nvmlDeviceGetCount failed: {error_name(int(exc.value))}", int(exc.value)
            ) from None

    def handle(self, index: int) -> Any:
        """Handle of GPU ``index``; raises :class:`GpuLostError` if that GPU cannot be opened."""
        try:
            return self.lib.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            self._fail(f"handle of GPU {index}", exc)
            raise GpuLostError(
                f"cannot open GPU {index}: {error_name(int(exc.value))}", int(exc.value)
            ) from None

    # ------------------------------------------------------------------ static-ish fields (slow tier)

    def name(self, h: Any) -> str | None:
        return _text(self._q("name", "nvmlDeviceGetName", h))

    def uuid(self, h: Any) -> str | None:
        return _text(self._q("uuid", "nvmlDeviceGetUUID", h))

    def serial(self, h: Any) -> str | None:
        return _text(self._q("serial", "nvmlDeviceGetSerial", h))

    def pci_bus_id(self, h: Any) -> str | None:
        info = self._q("PCI info", "nvmlDeviceGetPciInfo", h)
        return None if info is None else _text(getattr(info, "busId", None))

    def temp_threshold(self, h: Any, which: int) -> int | None:
        value = self._q("temperature threshold", "nvmlDeviceGetTemperatureThreshold", h, which)
        return None if value is None else int(value)

    def power_limit(self, h: Any) -> float | None:
        mw = self._q("power limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        return None if mw is None else mw / 1000.0

    def ecc_volatile(self, h: Any) -> tuple[int | None, int | None]:
        """Volatile (since driver load) corrected and uncorrected ECC error counts."""
        fn = "nvmlDeviceGetTotalEccErrors"
        corr = self._q("ECC corrected", fn, h, ECC_CORRECTED, VOLATILE_ECC)
        uncorr = self._q("ECC uncorrected", fn, h, ECC_UNCORRECTED, VOLATILE_ECC)
        return (None if corr is None else int(corr), None if uncorr is None else int(uncorr))

    def mig_mode(self, h: Any) -> bool | None:
        mode = self._q("MIG mode", "nvmlDeviceGetMigMode", h)
        if mode is None:
            return None
        return int(mode[0]) == MIG_ENABLE

    def mig_handles(self, h: Any) -> list[Any]:
        """Handles of the MIG devices that exist (empty slots answer NOT_FOUND / INVALID_ARGUMENT)."""
        count = self._q("MIG device count", "nvmlDeviceGetMaxMigDeviceCount", h)
        handles: list[Any] = []
        for i in range(int(count or 0)):
            try:
                handles.append(self.lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
            except pynvml.NVMLError as exc:
                if int(exc.value) in (_code("NOT_FOUND"), _code("INVALID_ARGUMENT")):
                    continue
                self._fail("MIG device handle", exc)
        return handles

    def mig_instance(self, mh: Any) -> MigInstance | None:
        gi = self._q("MIG GPU instance id", "nvmlDeviceGetGpuInstanceId", mh)
        if gi is None:
            return None
        ci = self._q("MIG compute instance id", "nvmlDeviceGetComputeInstanceId", mh)
        mem = self.memory(mh)
        return MigInstance(
            gi_id=int(gi),
            ci_id=None if ci is None else int(ci),
            uuid=self.uuid(mh),
            memory_total=None if mem is None else mem.total,
            memory_used=None if mem is None else mem.used,
        )

    # ------------------------------------------------------------------ fast tier

    def utilization(self, h: Any) -> tuple[int | None, int | None]:
        u = self._q("utilization", "nvmlDeviceGetUtilizationRates", h)
        if u is None:
            return (None, None)
        return (int(u.gpu), int(u.memory))

    def gpm_open(self, h: Any) -> GpmState | None:
        """GPM sample buffers for a GPU that supports GPM (Hopper and later), else None."""
        support = self._q("GPM support", "nvmlGpmQueryDeviceSupport", h)
        if support is None or not int(getattr(support, "isSupportedDevice", 0)):
            return None
        first = self._q("GPM sample", "nvmlGpmSampleAlloc")
        second = self._q("GPM sample", "nvmlGpmSampleAlloc") if first is not None else None
        if first is None or second is None:
            self.gpm_free(GpmState(first, None))
            return None
        return GpmState(first, second)

    def gpm_free(self, state: GpmState) -> None:
        for sample in (state.prev, state.cur):
            if sample is not None:
                self._q("GPM sample free", "nvmlGpmSampleFree", sample)

    def sm_activity(self, h: Any, state: GpmState) -> int | None:
        """GPM SM activity (percent of SMs busy) since the previous call; None on the first call and when
        GPM answers no value. A missing-field error from the sampling raises nothing: the caller sees
        ``state.cur is None`` afterwards and stops asking (the GPU or driver does not do GPM)."""
        try:
            self.lib.nvmlGpmSampleGet(h, state.cur)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            if isinstance(exc, pynvml.NVMLError):
                self._fail("GPM sample", exc)
            state.primed = False
            self.gpm_free(state)
            state.prev = state.cur = None
            return None
        state.prev, state.cur = state.cur, state.prev
        if not state.primed:
            state.primed = True
            return None
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 1
        mg.sample1, mg.sample2 = state.cur, state.prev  # older, newer
        mg.metrics[0].metricId = GPM_SM_UTIL
        if self._q("GPM metrics", "nvmlGpmMetricsGet", mg) is None or int(mg.metrics[0].nvmlReturn) != 0:
            return None
        value = float(mg.metrics[0].value)
        return max(0, min(100, round(value))) if value == value else None  # NaN: no value

    def memory(self, h: Any) -> MemoryReading | None:
        """MemoryInfo v2 (v1 counts reserved memory as used), falling back to v1 on old drivers."""
        if self._mem_v2:
            try:
                m = self.lib.nvmlDeviceGetMemoryInfo(h, version=MEMORY_V2)
            except pynvml.NVMLError as exc:
                code = int(exc.value)
                if code in (_code("FUNCTION_NOT_FOUND"), _code("ARGUMENT_VERSION_MISMATCH")):
                    log.info("MemoryInfo v2 not available (%s); using v1", error_name(code))
                    self._mem_v2 = False
                elif code != _code("NOT_SUPPORTED"):
                    self._fail("memory", exc)
                    return None
            else:
                return MemoryReading(int(m.total), int(m.used), int(m.reserved))
        m = self._q("memory", "nvmlDeviceGetMemoryInfo", h)
        if m is None:
            return None
        return MemoryReading(int(m.total), int(m.used), None)

    def temperature(self, h: Any) -> int | None:
        value = self._q("temperature", "nvmlDeviceGetTemperature", h, TEMPERATURE_GPU)
        return None if value is None else int(value)

    def power_draw(self, h: Any) -> float | None:
        mw = self._q("power usage", "nvmlDeviceGetPowerUsage", h)
        return None if mw is None else mw / 1000.0

    def clock(self, h: Any, which: int) -> int | None:
        value = self._q("clock", "nvmlDeviceGetClockInfo", h, which)
        return None if value is None else int(value)

    def fan_speed(self, h: Any) -> int | None:
        value = self._q("fan speed", "nvmlDeviceGetFanSpeed", h)
        return None if value is None else int(value)

    def throttle_reasons(self, h: Any) -> list[str] | None:
        """Clock event reasons (newer name), falling back to the deprecated throttle-reasons call."""
        if self._reasons_fn == "nvmlDeviceGetCurrentClocksEventReasons":
            fn = getattr(self.lib, self._reasons_fn, None)
            if fn is not None:
                try:
                    return decode_throttle(int(fn(h)))
                except pynvml.NVMLError as exc:
                    if int(exc.value) != _code("FUNCTION_NOT_FOUND"):
                        self._fail("clock event reasons", exc)
                        return None
            self._reasons_fn = "nvmlDeviceGetCurrentClocksThrottleReasons"
        mask = self._q("clock throttle reasons", self._reasons_fn, h)
        return None if mask is None else decode_throttle(int(mask))

    def _process_list(self, kind: str, h: Any) -> list[Any] | None:
        base = (
            "nvmlDeviceGetComputeRunningProcesses"
            if kind == "compute"
            else "nvmlDeviceGetGraphicsRunningProcesses"
        )
        if self._procs_v3[kind]:
            try:
                return list(getattr(self.lib, base)(h))
            except pynvml.NVMLLibraryMismatchError:
                pass
            except pynvml.NVMLError as exc:
                if int(exc.value) != _code("FUNCTION_NOT_FOUND"):
                    self._fail(f"{kind} processes", exc)
                    return None
            log.info("%s_v3 not available; falling back to _v2", base)
            self._procs_v3[kind] = False
        procs = self._q(f"{kind} processes", base + "_v2", h)
        return None if procs is None else list(procs)

    def processes(self, h: Any) -> list[RawProcess] | None:
        """Compute and graphics processes merged by pid; None if neither list is available."""
        compute = self._process_list("compute", h)
        graphics = self._process_list("graphics", h)
        if compute is None and graphics is None:
            return None
        merged: dict[int, RawProcess] = {}
        for kind, procs in (("compute", compute or []), ("graphics", graphics or [])):
            for p in procs:
                pid = int(p.pid)
                mem = getattr(p, "usedGpuMemory", None)
                mem = None if mem is None else int(mem)
                known = merged.get(pid)
                if known is None:
                    merged[pid] = RawProcess(pid, kind, mem)
                else:
                    if known.kind != kind:
                        known.kind = "compute+graphics"
                    if mem is not None and (known.used_memory is None or mem > known.used_memory):
                        known.used_memory = mem
        return list(merged.values())

    def process_util(self, h: Any, since_ts: int) -> ProcessUtil | None:
        """Per-process SM/memory utilization since ``since_ts`` (µs). None: no samples or not supported."""
        try:
            samples = self.lib.nvmlDeviceGetProcessUtilization(h, since_ts)
        except pynvml.NVMLError as exc:
            self._fail("process utilization", exc)  # NOT_FOUND ("no samples") lands here as None
            return None
        by_pid: dict[int, tuple[int, int]] = {}
        last = since_ts
        for s in samples:
            ts = int(s.timeStamp)
            if ts < since_ts:
                continue
            last = max(last, ts)
            sm = max(0, min(100, int(s.smUtil)))
            mem = max(0, min(100, int(s.memUtil)))
            pid = int(s.pid)
            old = by_pid.get(pid)
            by_pid[pid] = (sm, mem) if old is None else (max(old[0], sm), max(old[1], mem))
        return ProcessUtil(by_pid, last)

    # ------------------------------------------------------------------ Xid events

    def event_set(self) -> Any | None:
        """A new event set, or None where event sets are not supported (skip quietly)."""
        return self._q("event set", "nvmlEventSetCreate")

    def register_xid(self, h: Any, event_set: Any) -> bool:
        supported = self._q("supported event types", "nvmlDeviceGetSupportedEventTypes", h)
        if supported is None or not int(supported) & EVENT_XID:
            return False
        try:
            self.lib.nvmlDeviceRegisterEvents(h, EVENT_XID, event_set)
        except pynvml.NVMLError as exc:
            self._fail("register events", exc)
            return False
        return True

    def wait_event(self, event_set: Any, timeout_ms: int) -> XidReading | None:
        """One event, or None on timeout. Raises DriverError / GpuLostError like the other calls, and
        :class:`EventWaitError` for any other failure: returning None there would make the caller's wait
        loop spin at 100 % CPU (an error comes back at once, where a timeout takes ``timeout_ms``).
        """
        try:
            data = self.lib.nvmlEventSetWait(event_set, timeout_ms)
        except pynvml.NVMLError as exc:
            code = int(exc.value)
            if code == _code("TIMEOUT"):
                return None
            self._fail("event wait", exc)
            raise EventWaitError(
                f"nvmlEventSetWait failed: {error_name(code)}", code, missing=code in FIELD_MISSING
            ) from None
        return XidReading(data.device, int(data.eventType), int(data.eventData))

    def free_event_set(self, event_set: Any) -> None:
        try:
            self.lib.nvmlEventSetFree(event_set)
        except pynvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", error_name(int(exc.value)))
