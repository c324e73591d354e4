"""Every NVML query the agent makes, one method per concern, each mapping NVML's errors the same way.

It talks to an *NVML library object*: :class:`~gpufleet.agent.nvml.lib.NvmlLib` (pynvml made the same on
every supported nvidia-ml-py) or :class:`gpufleet.agent.fake.FakeNvml`, which has the same function names
and raises real ``pynvml.NVMLError`` instances. Either way this code maps the errors, so the fake backend
exercises exactly what runs on hardware.

Error mapping (agent/nvml/codes.py owns the classes): a missing field is None; a failed field is None and
noted in the thread's :class:`ReadLog` (the sampler sends it as ``read_errors`` and decides when a GPU whose
every reading fails is lost); NVML saying a device is gone raises :class:`GpuLostError`; a driver gone raises
:class:`DriverError`.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any

import pynvml
from gpufleet.agent.errors import DriverError, EventWaitError, GpuLostError, GpuUnreadable, NvmlUnavailable
from gpufleet.agent.nvml import codes
from gpufleet.agent.nvml.lib import LibraryMismatch, NvmlLib
from gpufleet.agent.nvml.readings import (
    GpmReading,
    GpmState,
    MemoryReading,
    ProcessList,
    ProcessUtil,
    RawProcess,
    ReadLog,
    RemappedRows,
    SystemInfo,
    XidReading,
)
from gpufleet.agent.wire import MigInstance

log = logging.getLogger(__name__)

#: GPM metrics read each interval -> the GpmReading attribute each fills.
_GPM_METRICS: tuple[tuple[int, str], ...] = (
    (codes.GPM_SM_UTIL, "sm_active"),
    (codes.GPM_ANY_TENSOR_UTIL, "tensor_active"),
    (codes.GPM_DRAM_BW_UTIL, "dram_active"),
    (codes.GPM_GRAPHICS_UTIL, "gr_active"),
)
#: How much of the field list a process-list call may fail on without the list becoming unknown: the
#: graphics and MPS lists are simply absent on many GPUs and drivers.
_OPTIONAL_LIST: frozenset[int] = frozenset({codes.NOT_SUPPORTED, codes.FUNCTION_NOT_FOUND})


def make_error(code: int) -> Exception:
    """A real ``pynvml.NVMLError`` (the right subclass) for ``code``: what the fake backend raises."""
    err: Exception = pynvml.NVMLError(code)
    return err


def library_mismatch(message: str) -> Exception:
    """What pynvml raises when an unversioned call finds no matching symbol (where the module has it)."""
    return LibraryMismatch(message)


def new_gpm_sample() -> Any:
    """An opaque GPM sample pointer of pynvml's type (the fake backend's nvmlGpmSampleAlloc)."""
    return ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())


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


def _code(exc: BaseException) -> int:
    return int(getattr(exc, "value", codes.UNKNOWN))


class Gateway:
    """Every NVML query the agent makes, with the error mapping described in the module docstring."""

    def __init__(self, lib: Any | None = None, backend: str | None = None) -> None:
        self.lib: Any = NvmlLib() if lib is None else lib
        self.backend = backend or ("nvml" if lib is None else "fake")
        self._mem_v2 = True
        self._temp_v = True
        self._reasons_fn = "nvmlDeviceGetCurrentClocksEventReasons"
        self._warned: set[tuple[str, int]] = set()
        self._local = threading.local()  # the ReadLog of the thread reading (the sampler's reader thread)

    # ------------------------------------------------------------------ error mapping

    def begin_reads(self) -> ReadLog:
        """Start a fresh :class:`ReadLog` for this thread's reads (one GPU, one sample) and return it."""
        self._local.log = ReadLog()
        return self._local.log  # type: ignore[no-any-return]

    def _note_ok(self) -> None:
        rl: ReadLog | None = getattr(self._local, "log", None)
        if rl is not None:
            rl.ok += 1

    def _fail(self, what: str, exc: BaseException) -> None:
        """Raise for device/driver loss; otherwise return (meaning: the field is None), noting a failure."""
        code = _code(exc)
        if code in codes.DRIVER_GONE:
            raise DriverError(f"NVML driver error in {what}: {codes.error_name(code)}", code)
        if code in codes.DEVICE_GONE:
            raise GpuLostError(f"{codes.error_name(code)} ({what})", code)
        if code in codes.FIELD_MISSING:
            return
        rl: ReadLog | None = getattr(self._local, "log", None)
        if rl is not None:
            rl.failed[what] = codes.error_name(code)
        if (what, code) not in self._warned:
            self._warned.add((what, code))
            log.warning("NVML %s failed with %s; reporting it as null", what, codes.error_name(code))

    def _q(self, what: str, fn_name: str, *args: Any, reading: bool = True, **kwargs: Any) -> Any:
        """``fn_name(*args)``, or None with the error mapped. ``reading=False``: a capability probe or
        bookkeeping call, which does not count as the GPU answering (for "every reading failed")."""
        fn: Callable[..., Any] | None = getattr(self.lib, fn_name, None)
        if fn is None:
            return None
        try:
            value = fn(*args, **kwargs)
        except pynvml.NVMLError as exc:
            self._fail(what, exc)
            return None
        except LibraryMismatch:
            return None
        if reading:
            self._note_ok()
        return value

    # ------------------------------------------------------------------ lifecycle and system

    def init(self) -> None:
        """Initialise NVML. Raises :class:`NvmlUnavailable` with a message fit for one stderr line."""
        try:
            self.lib.nvmlInit()
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code == codes.LIBRARY_NOT_FOUND:
                why = "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
            elif code == codes.DRIVER_NOT_LOADED:
                why = "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)"
            elif code == codes.LIB_RM_VERSION_MISMATCH:
                why = ("driver/library version mismatch (reboot or reload nvidia modules after a driver "
                       "upgrade)")
            elif code == codes.NO_PERMISSION:
                why = "no permission to open the NVIDIA devices (NVML_ERROR_NO_PERMISSION)"
            else:
                why = f"nvmlInit failed: {codes.error_name(code)}"
            raise NvmlUnavailable(f"NVML not available: {why}") from None

    def shutdown(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", codes.error_name(_code(exc)))

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
            code = _code(exc)
            raise DriverError(f"nvmlDeviceGetCount failed: {codes.error_name(code)}", code) from None

    def handle(self, index: int) -> Any:
        """Handle of GPU ``index``. Raises :class:`GpuLostError` when NVML says the GPU is gone and
        :class:`GpuUnreadable` for anything else (NO_PERMISSION above all: the GPU is fine, the agent may not
        open it)."""
        try:
            return self.lib.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code in codes.DRIVER_GONE:
                self._fail(f"handle of GPU {index}", exc)
            if code in codes.DEVICE_GONE:
                raise GpuLostError(f"cannot open GPU {index}: {codes.error_name(code)}", code) from None
            raise GpuUnreadable(f"cannot open GPU {index}: {codes.error_name(code)}", code) from None

    # ------------------------------------------------------------------ static-ish fields (slow tier)

    def name(self, h: Any) -> str | None:
        return _text(self._q("name", "nvmlDeviceGetName", h))

    def uuid(self, h: Any) -> str | None:
        return _text(self._q("uuid", "nvmlDeviceGetUUID", h))

    def serial(self, h: Any) -> str | None:
        return _text(self._q("serial", "nvmlDeviceGetSerial", h))

    def pci_bus_id(self, h: Any) -> str | None:
        info = self._q("pci_bus_id", "nvmlDeviceGetPciInfo", h)
        return None if info is None else _text(getattr(info, "busId", None))

    def temp_threshold(self, h: Any, which: int) -> int | None:
        what = "temp_slowdown" if which == codes.THRESHOLD_SLOWDOWN else "temp_shutdown"
        value = self._q(what, "nvmlDeviceGetTemperatureThreshold", h, which)
        return None if value is None else int(value)

    def power_limit(self, h: Any) -> float | None:
        mw = self._q("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        return None if mw is None else mw / 1000.0

    def ecc_volatile(self, h: Any) -> tuple[int | None, int | None]:
        """Volatile (since driver load) corrected and uncorrected ECC error counts."""
        fn = "nvmlDeviceGetTotalEccErrors"
        corr = self._q("ecc_corrected", fn, h, codes.ECC_CORRECTED, codes.VOLATILE_ECC)
        uncorr = self._q("ecc_uncorrected", fn, h, codes.ECC_UNCORRECTED, codes.VOLATILE_ECC)
        return (None if corr is None else int(corr), None if uncorr is None else int(uncorr))

    def remapped_rows(self, h: Any) -> RemappedRows | None:
        """Row-remapping counts and flags (A100 and later; NOT_SUPPORTED before)."""
        rows = self._q("remapped_rows", "nvmlDeviceGetRemappedRows", h)
        if rows is None:
            return None
        corr, unc, pending, failed = (int(v) for v in rows)
        return RemappedRows(corr, unc, bool(pending), bool(failed))

    def mig_mode(self, h: Any) -> bool | None:
        mode = self._q("mig_mode", "nvmlDeviceGetMigMode", h)
        if mode is None:
            return None
        return int(mode[0]) == codes.MIG_ENABLE

    def mig_handles(self, h: Any) -> list[Any]:
        """Handles of the MIG devices that exist (empty slots answer NOT_FOUND / INVALID_ARGUMENT)."""
        count = self._q("mig device count", "nvmlDeviceGetMaxMigDeviceCount", h, reading=False)
        handles: list[Any] = []
        for i in range(int(count or 0)):
            try:
                handles.append(self.lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
            except pynvml.NVMLError as exc:
                if _code(exc) in (codes.NOT_FOUND, codes.INVALID_ARGUMENT):
                    continue
                self._fail("mig device handle", exc)
        return handles

    def mig_instance(self, mh: Any) -> MigInstance | None:
        """One MIG device: its ids, uuid, profile (from its name, "NVIDIA A100-SXM4-80GB MIG 1g.10gb" ->
        "1g.10gb", as nvidia-smi shows it) and memory."""
        gi = self._q("mig gpu instance id", "nvmlDeviceGetGpuInstanceId", mh)
        if gi is None:
            return None
        ci = self._q("mig compute instance id", "nvmlDeviceGetComputeInstanceId", mh)
        name = self.name(mh) or ""
        _, sep, profile = name.rpartition(" MIG ")
        mem = self.memory(mh)
        return MigInstance(
            gi_id=int(gi),
            ci_id=None if ci is None else int(ci),
            uuid=self.uuid(mh),
            profile=profile.strip() or None if sep else None,
            memory_total=None if mem is None else mem.total,
            memory_used=None if mem is None else mem.used,
        )

    # ------------------------------------------------------------------ fast tier

    def utilization(self, h: Any) -> tuple[int | None, int | None]:
        u = self._q("util_gpu", "nvmlDeviceGetUtilizationRates", h)
        if u is None:
            return (None, None)
        return (int(u.gpu), int(u.memory))

    def memory(self, h: Any) -> MemoryReading | None:
        """MemoryInfo v2 (v1 counts reserved memory as used), falling back to v1 on old drivers."""
        if self._mem_v2:
            try:
                m = self.lib.nvmlDeviceGetMemoryInfo(h, version=codes.MEMORY_V2)
            except pynvml.NVMLError as exc:
                code = _code(exc)
                if code in (codes.FUNCTION_NOT_FOUND, codes.ARGUMENT_VERSION_MISMATCH):
                    log.info("MemoryInfo v2 not available (%s); using v1", codes.error_name(code))
                    self._mem_v2 = False
                elif code != codes.NOT_SUPPORTED:
                    self._fail("memory_used", exc)
                    return None
            else:
                self._note_ok()
                return MemoryReading(int(m.total), int(m.used), int(m.reserved))
        m = self._q("memory_used", "nvmlDeviceGetMemoryInfo", h)
        if m is None:
            return None
        return MemoryReading(int(m.total), int(m.used), None)

    def temperature(self, h: Any) -> int | None:
        """``nvmlDeviceGetTemperatureV`` where the driver has it, else the deprecated call."""
        if self._temp_v:
            try:
                value = self.lib.nvmlDeviceGetTemperatureV(h, codes.TEMPERATURE_GPU)
            except pynvml.NVMLError as exc:
                if _code(exc) != codes.FUNCTION_NOT_FOUND:
                    self._fail("temperature", exc)
                    return None
                log.info("nvmlDeviceGetTemperatureV not in this driver; using nvmlDeviceGetTemperature")
                self._temp_v = False
            except AttributeError:  # a library object without it (an old fake)
                self._temp_v = False
            else:
                self._note_ok()
                return int(value)
        value = self._q("temperature", "nvmlDeviceGetTemperature", h, codes.TEMPERATURE_GPU)
        return None if value is None else int(value)

    def power_draw(self, h: Any) -> float | None:
        mw = self._q("power_draw", "nvmlDeviceGetPowerUsage", h)
        return None if mw is None else mw / 1000.0

    def energy(self, h: Any) -> int | None:
        """Energy used since the driver loaded, millijoules (Volta and later): exact energy per job, where
        power samples would miss the spikes between them."""
        mj = self._q("energy_mj", "nvmlDeviceGetTotalEnergyConsumption", h)
        return None if mj is None else int(mj)

    def clock(self, h: Any, which: int) -> int | None:
        what = "clock_sm" if which == codes.CLOCK_SM else "clock_mem"
        value = self._q(what, "nvmlDeviceGetClockInfo", h, which)
        return None if value is None else int(value)

    def fan_speed(self, h: Any) -> int | None:
        value = self._q("fan_speed", "nvmlDeviceGetFanSpeed", h)
        return None if value is None else int(value)

    def throttle_reasons(self, h: Any) -> list[str] | None:
        """Clock event reasons (newer name), falling back to the deprecated throttle-reasons call."""
        if self._reasons_fn == "nvmlDeviceGetCurrentClocksEventReasons":
            fn = getattr(self.lib, self._reasons_fn, None)
            if fn is not None:
                try:
                    mask = int(fn(h))
                except pynvml.NVMLError as exc:
                    if _code(exc) != codes.FUNCTION_NOT_FOUND:
                        self._fail("throttle_reasons", exc)
                        return None
                else:
                    self._note_ok()
                    return codes.decode_throttle(mask)
            self._reasons_fn = "nvmlDeviceGetCurrentClocksThrottleReasons"
        mask = self._q("throttle_reasons", self._reasons_fn, h)
        return None if mask is None else codes.decode_throttle(int(mask))

    def health_fields(self, h: Any) -> tuple[int | None, str | None]:
        """(HBM temperature, GPU recovery action) in one nvmlDeviceGetFieldValues call. Each value carries its
        own return code: a driver without the recovery-action field (before r550) answers NOT_SUPPORTED for
        it alone."""
        values = self._q("health fields", "nvmlDeviceGetFieldValues", h,
                         [codes.FI_MEMORY_TEMP, codes.FI_GPU_RECOVERY_ACTION])
        if values is None:
            return (None, None)
        memory_temp: int | None = None
        action: str | None = None
        for v in values:
            rc = int(v.nvmlReturn)
            fid = int(v.fieldId)
            what = "memory_temperature" if fid == codes.FI_MEMORY_TEMP else "recovery_action"
            if rc != codes.SUCCESS:
                self._fail(what, make_error(rc))
                continue
            number = _field_number(v)
            if number is None:
                continue
            if fid == codes.FI_MEMORY_TEMP:
                memory_temp = int(number)
            elif fid == codes.FI_GPU_RECOVERY_ACTION:
                action = codes.RECOVERY_ACTIONS.get(int(number), f"action_{int(number)}")
        return (memory_temp, action)

    # ------------------------------------------------------------------ GPM (Hopper and later)

    def gpm_open(self, h: Any, gi_id: int | None = None) -> GpmState | None:
        """GPM sample buffers for a GPU (or, with ``gi_id``, one of its MIG instances) that supports GPM."""
        support = self._q("gpm support", "nvmlGpmQueryDeviceSupport", h, reading=False)
        if support is None or not int(getattr(support, "isSupportedDevice", 0)):
            return None
        first = self._q("gpm sample", "nvmlGpmSampleAlloc", reading=False)
        second = self._q("gpm sample", "nvmlGpmSampleAlloc", reading=False) if first is not None else None
        if first is None or second is None:
            self.gpm_free(GpmState(first, None))
            return None
        return GpmState(first, second, gi_id=gi_id)

    def gpm_free(self, state: GpmState) -> None:
        for sample in (state.prev, state.cur):
            if sample is not None:
                self._q("gpm sample free", "nvmlGpmSampleFree", sample, reading=False)

    def gpm_activity(self, h: Any, state: GpmState) -> GpmReading | None:
        """GPM activity since the previous call; None on the first call. A MIG instance is sampled with
        nvmlGpmMigSampleGet on the parent handle (NVML API reference, "GPM"). A failing sample raises nothing:
        the caller sees ``state.cur is None`` afterwards and stops asking."""
        try:
            if state.gi_id is None:
                self.lib.nvmlGpmSampleGet(h, state.cur)
            else:
                self.lib.nvmlGpmMigSampleGet(h, state.gi_id, state.cur)
        except (pynvml.NVMLError, LibraryMismatch, AttributeError) as exc:
            if isinstance(exc, pynvml.NVMLError):
                self._fail("gpm sample", exc)
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
        mg.numMetrics = len(_GPM_METRICS)
        mg.sample1, mg.sample2 = state.cur, state.prev  # older, newer
        for i, (metric, _) in enumerate(_GPM_METRICS):
            mg.metrics[i].metricId = metric
        if self._q("gpm metrics", "nvmlGpmMetricsGet", mg) is None:
            return None
        out = GpmReading()
        for i, (_, attr) in enumerate(_GPM_METRICS):
            if int(mg.metrics[i].nvmlReturn) != codes.SUCCESS:
                continue
            value = float(mg.metrics[i].value)
            if value == value:  # NaN: no value
                setattr(out, attr, max(0, min(100, round(value))))
        return out

    # ------------------------------------------------------------------ processes

    def _process_list(self, kind: str, h: Any) -> tuple[list[Any] | None, str | None]:
        """(rows, None), or (None, why) when this list could not be read."""
        fn = {"compute": "nvmlDeviceGetComputeRunningProcesses",
              "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
              "mps": "nvmlDeviceGetMPSComputeRunningProcesses"}[kind]
        call = getattr(self.lib, fn, None)
        if call is None:
            return None, codes.error_name(codes.FUNCTION_NOT_FOUND)
        try:
            rows = list(call(h))
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if kind == "compute" or code not in _OPTIONAL_LIST:
                self._fail(f"{kind} processes", exc)  # raises for a lost GPU or driver; notes a failure
            return None, codes.error_name(code)
        except LibraryMismatch:
            return None, codes.error_name(codes.FUNCTION_NOT_FOUND)
        self._note_ok()
        return rows, None

    def processes(self, h: Any) -> ProcessList:
        """Compute, graphics and MPS-client processes merged by pid.

        The list is *unknown* (``error`` set) when the compute list cannot be read, or another list fails
        with anything but "not supported" (a graphics process holding memory would otherwise look like a
        leaked context). In MIG mode pass each MIG device's handle: on the parent NVML lists processes only
        for privileged callers (NVML API reference, nvmlDeviceGetComputeRunningProcesses_v3)."""
        merged: dict[int, RawProcess] = {}
        for kind in ("compute", "graphics", "mps"):
            rows, error = self._process_list(kind, h)
            if rows is None:
                if kind == "compute" or (error is not None and not _optional(error)):
                    return ProcessList([], error)
                continue
            for p in rows:
                _merge(merged, kind, p)
        return ProcessList(list(merged.values()))

    def process_util(self, h: Any, since_ts: int) -> ProcessUtil | None:
        """Per-process SM/memory utilization since ``since_ts`` (µs). NOT_FOUND ("no process ran kernels
        in the window") is an empty answer, not a missing one: every listed process then used 0 %. None:
        the call is not supported here (MIG, pre-Maxwell) or failed."""
        try:
            samples = self.lib.nvmlDeviceGetProcessUtilization(h, since_ts)
        except pynvml.NVMLError as exc:
            if _code(exc) == codes.NOT_FOUND:
                self._note_ok()
                return ProcessUtil({}, since_ts)
            self._fail("process utilization", exc)
            return None
        self._note_ok()
        by_pid: dict[int, tuple[int, int]] = {}
        last = since_ts
        # pynvml's structures decode bytes on every field read, in Python (its __getattribute__); these rows
        # hold numbers only, so read them through ctypes' own field descriptors (issue 33: a quarter of this
        # call's time, every GPU, every sample). The fake backend's rows are plain objects.
        field: Callable[[Any, str], Any] = ctypes.Structure.__getattribute__ \
            if samples and isinstance(samples[0], ctypes.Structure) else getattr
        for s in samples:
            ts = int(field(s, "timeStamp"))
            if ts < since_ts:
                continue
            last = max(last, ts)
            sm = max(0, min(100, int(field(s, "smUtil"))))
            mem = max(0, min(100, int(field(s, "memUtil"))))
            pid = int(field(s, "pid"))
            old = by_pid.get(pid)
            by_pid[pid] = (sm, mem) if old is None else (max(old[0], sm), max(old[1], mem))
        return ProcessUtil(by_pid, last)

    # ------------------------------------------------------------------ Xid events

    def event_set(self) -> Any | None:
        """A new event set, or None where event sets are not supported (skip quietly)."""
        return self._q("event set", "nvmlEventSetCreate", reading=False)

    def register_xid(self, h: Any, event_set: Any) -> bool:
        supported = self._q("supported event types", "nvmlDeviceGetSupportedEventTypes", h, reading=False)
        if supported is None or not int(supported) & codes.EVENT_XID:
            return False
        try:
            self.lib.nvmlDeviceRegisterEvents(h, codes.EVENT_XID, event_set)
        except pynvml.NVMLError as exc:
            self._fail("register events", exc)
            return False
        return True

    def probe(self, h: Any) -> bool:
        """Whether NVML still answers for this handle (a cheap read): False when it says the GPU is lost."""
        try:
            self.lib.nvmlDeviceGetUUID(h)
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code in codes.DRIVER_GONE:
                self._fail("probe", exc)
            return code not in codes.DEVICE_GONE
        return True

    def wait_event(self, event_set: Any, timeout_ms: int) -> XidReading | None:
        """One event, or None on timeout. Raises DriverError / GpuLostError like the other calls, and
        :class:`EventWaitError` for any other failure: returning None there would make the caller's wait
        loop spin at 100 % CPU (an error comes back at once, where a timeout takes ``timeout_ms``).
        """
        try:
            data = self.lib.nvmlEventSetWait(event_set, timeout_ms)
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code == codes.TIMEOUT:
                return None
            if code in codes.DRIVER_GONE or code in codes.DEVICE_GONE:
                self._fail("event wait", exc)
            raise EventWaitError(
                f"nvmlEventSetWait failed: {codes.error_name(code)}", code,
                missing=code in codes.FIELD_MISSING,
            ) from None
        return XidReading(data.device, int(data.eventType), int(data.eventData))

    def free_event_set(self, event_set: Any) -> None:
        try:
            self.lib.nvmlEventSetFree(event_set)
        except pynvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", codes.error_name(_code(exc)))


def _optional(error: str) -> bool:
    return error in (codes.error_name(c) for c in _OPTIONAL_LIST)


def _merge(merged: dict[int, RawProcess], kind: str, p: Any) -> None:
    pid = int(p.pid)
    mem = getattr(p, "usedGpuMemory", None)
    mem = None if mem is None else int(mem)
    gi = _instance(getattr(p, "gpuInstanceId", None))
    ci = _instance(getattr(p, "computeInstanceId", None))
    known = merged.get(pid)
    if known is None:
        merged[pid] = RawProcess(pid, kind, mem, gi, ci)
        return
    if kind == "mps":
        known.kind = "mps"
    elif known.kind != kind and known.kind != "mps":
        known.kind = "compute+graphics"
    if mem is not None and (known.used_memory is None or mem > known.used_memory):
        known.used_memory = mem


def _instance(value: Any) -> int | None:
    if value is None:
        return None
    v = int(value)
    return None if v == codes.NO_INSTANCE else v


def _field_number(v: Any) -> float | None:
    """The value of a ``c_nvmlFieldValue_t`` by its valueType (nvml.h nvmlValueType_t)."""
    kind = int(getattr(v, "valueType", 0))
    val = v.value
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind)
    if attr is None:
        return None
    number = getattr(val, attr, None)
    return None if number is None else float(number)
