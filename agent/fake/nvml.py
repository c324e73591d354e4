"""A scenario-driven fake NVML, for tests and the demo: no GPU, no driver, any machine.

:class:`FakeNvml` has the same function names and signatures as ``pynvml`` and raises real
``pynvml.NVMLError`` instances, so :class:`gpufleet.agent.nvml.Gateway` runs the very same code (and error
mapping) as on hardware. Return objects carry the attribute names of pynvml's ctypes structs.

A scenario (YAML; :mod:`gpufleet.agent.fake.scenario`) describes GPUs, processes and a timeline; time is
seconds since the backend started, from an injectable clock so tests are deterministic. Processes are
attributed by :class:`~gpufleet.agent.fake.procs.FakeProcs`.

What real drivers do, and this fake does too (each with its source; tests/agent and tests/fakenvml check
them through the real gateway):
- per-process utilization has samples only for processes that ran kernels, and NOT_FOUND when none did
  (NVML API reference, nvmlDeviceGetProcessUtilization; nvitop gives 0 to a process without a sample);
- any field may fail alone, UNKNOWN included (gpustat issue #161: fan speed; ``ERR!`` power reads);
- MIG: no utilization and no per-process utilization on the parent (nvitop issue #5), the parent's process
  list only for privileged callers, processes and GPM per instance (NVML API reference, "Multi-Instance GPU");
- an event set wait answers GPU_IS_LOST while a registered GPU is lost (NVML API reference, nvmlEventSetWait);
- a GPU whose handle may not be opened answers NO_PERMISSION (nvidia-container-toolkit issue #842);
- a call that hangs (D state after some Xids) blocks in real time: the scenario's ``hang`` events.
"""


from __future__ import annotations

import math
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, Final

from gpufleet.agent import nvml
from gpufleet.agent.fake.scenario import FakeGpu, FakeMig, Scenario

MIB: Final = 1 << 20
#: How often a hung call looks whether its hang is over (real seconds: a hang is a wall-clock matter).
HANG_POLL_S: Final = 0.02


# ----------------------------------------------------------------------------------------- fake NVML


class FakeHandle:
    """A device handle; MIG device handles carry the slot of their instance."""

    __slots__ = ("index", "mig")

    def __init__(self, index: int, mig: int | None = None) -> None:
        self.index = index
        self.mig = mig

    def __repr__(self) -> str:
        return f"FakeHandle({self.index}, mig={self.mig})"


class _Obj:
    """A plain attribute bag, shaped like pynvml's structs (c_nvmlMemory_v2_t, ...)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class FakeEventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()
        self.delivered: set[tuple[int, int]] = set()  # (gpu index, xid position)


def _err(name: str) -> Exception:
    err: Exception = nvml.make_error(nvml.ERROR_CODES[name])
    return err


class FakeNvml:
    """The pynvml surface the agent uses, answering from a scenario at time ``clock() - start``."""

    def __init__(
        self,
        scenario: Scenario,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.sleep = sleep
        self._t0 = clock()
        self.wall0 = wall()
        self._init = 0
        self._lock = threading.RLock()
        self._handles = [FakeHandle(i) for i in range(len(scenario.gpus))]
        self._gpm: dict[int, tuple[int, float] | None] = {}  # GPM sample address -> (gpu index, t) taken
        self._energy: dict[int, tuple[float, float]] = {}  # gpu index -> (t, millijoules) at the last read
        self.calls = 0  # how many NVML calls were made (for tests and the overhead benchmark)

    # ------------------------------------------------------------------ time and checks

    def elapsed(self) -> float:
        return self.clock() - self._t0

    def _driver_error(self, t: float) -> int | None:
        for a, b, code in self.scenario.driver_errors:
            if a <= t < b:
                return code
        return None

    def _system(self) -> float:
        self.calls += 1
        t = self.elapsed()
        code = self._driver_error(t)
        if code is not None:
            raise nvml.make_error(code)
        if self._init <= 0:
            raise _err("UNINITIALIZED")
        return t

    def _device(self, handle: Any, what: str) -> tuple[FakeGpu, float]:
        t = self._system()
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.scenario.gpus):
            raise _err("INVALID_ARGUMENT")
        gpu = self.scenario.gpus[handle.index]
        while gpu.is_hung(t):  # blocked in the kernel until the hang ends (the clock moves on)
            time.sleep(HANG_POLL_S)
            t = self.elapsed()
        if gpu.is_lost(t):
            raise _err("GPU_IS_LOST")
        code = gpu.errors.get(what)
        if code is not None:
            raise nvml.make_error(code)
        return gpu, t

    def _parent(self, handle: Any, what: str) -> tuple[FakeGpu, float]:
        """A call the parent of a MIG GPU does not support (utilization and the like)."""
        gpu, t = self._device(handle, what)
        if gpu.mig is not None:
            raise _err("NOT_SUPPORTED")
        return gpu, t

    # ------------------------------------------------------------------ derived readings

    def util(self, gpu: FakeGpu, t: float) -> float:
        if gpu.util is not None:
            return gpu.util.at(t)
        return min(100.0, sum(p.sm(t) for p in gpu.running(t)))

    def temp(self, gpu: FakeGpu, t: float) -> float:
        return gpu.temperature.at(t) if gpu.temperature is not None else 30.0 + 0.35 * self.util(gpu, t)

    def power_w(self, gpu: FakeGpu, t: float) -> float:
        if gpu.power is not None:
            return gpu.power.at(t)
        busy = self.util(gpu, t) / 100.0
        return min(gpu.power_limit_w, gpu.idle_power_w + (gpu.power_limit_w - gpu.idle_power_w) * 0.85 * busy)

    def used_mib(self, gpu: FakeGpu, t: float) -> float:
        if gpu.mig:  # in MIG mode the instances account for the memory (their processes are inside them)
            used = sum(i.used_mib.at(t) for i in gpu.mig) + gpu.orphan_memory_mib.at(t)
        else:
            used = sum(p.memory_mib.at(t) for p in gpu.running(t)) + gpu.orphan_memory_mib.at(t)
        return max(0.0, min(used, gpu.memory_total_mib - gpu.reserved_mib))

    def reasons(self, gpu: FakeGpu, t: float) -> int:
        bits = nvml.THROTTLE_BITS
        mask = 0
        if self.util(gpu, t) < 1 and not gpu.running(t):
            mask |= bits["gpu_idle"]
        if self.power_w(gpu, t) >= 0.97 * gpu.power_limit_w:
            mask |= bits["sw_power_cap"]
        temp = self.temp(gpu, t)
        if temp >= gpu.temp_slowdown - 3:
            mask |= bits["sw_thermal"]
        if temp >= gpu.temp_slowdown:
            mask |= bits["hw_thermal"] | bits["hw_slowdown"]
        return mask

    # ------------------------------------------------------------------ init and system

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        with self._lock:
            self.calls += 1
            code = self._driver_error(self.elapsed())
            if code is not None:
                raise nvml.make_error(code)
            self._init += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            if self._init <= 0:
                raise _err("UNINITIALIZED")
            self._init -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._system()
        return self.scenario.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._system()
        return self.scenario.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._system()
        return self.scenario.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._system()
        return len(self.scenario.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        t = self._system()
        if not 0 <= index < len(self._handles):
            raise _err("INVALID_ARGUMENT")
        gpu = self.scenario.gpus[index]
        if gpu.is_lost(t):
            raise _err("GPU_IS_LOST")
        code = gpu.errors.get("handle")
        if code is not None:
            raise nvml.make_error(code)
        return self._handles[index]

    # ------------------------------------------------------------------ identity (MIG handles too)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu, _ = self._device(handle, "name")
        return (
            gpu.name
            if handle.mig is None
            else f"{gpu.name} MIG {self._mig(gpu, handle).profile or ''}".strip()
        )

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu, _ = self._device(handle, "uuid")
        if handle.mig is None:
            return gpu.uuid
        return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{gpu.uuid}/{handle.mig}"))

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        gpu, _ = self._device(handle, "serial")
        return gpu.serial

    def nvmlDeviceGetPciInfo(self, handle: Any) -> _Obj:
        gpu, _ = self._device(handle, "pci")
        bus = int(gpu.pci_bus_id.split(":")[1], 16)
        return _Obj(
            busId=gpu.pci_bus_id,
            busIdLegacy=gpu.pci_bus_id[4:],
            domain=0,
            bus=bus,
            device=0,
            pciDeviceId=0x20B210DE,
            pciSubSystemId=0x147F10DE,
        )

    # ------------------------------------------------------------------ fast readings

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Obj:
        gpu, t = self._parent(handle, "utilization")
        u = self.util(gpu, t)
        mu = gpu.util_mem.at(t) if gpu.util_mem is not None else u * 0.6
        return _Obj(gpu=int(round(u)), memory=int(round(mu)))

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> _Obj:
        gpu, _t = self._device(device, "gpm")
        return _Obj(version=1, isSupportedDevice=int(gpu.sm_active is not None))

    def nvmlGpmSampleAlloc(self) -> Any:
        self._system()
        sample = nvml.new_gpm_sample()
        self._gpm[nvml.handle_key(sample)] = None
        return sample

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._system()
        if self._gpm.pop(nvml.handle_key(gpmSample), 0) == 0:
            raise _err("INVALID_ARGUMENT")

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        gpu, t = self._parent(device, "gpm")
        if nvml.handle_key(gpmSample) not in self._gpm:
            raise _err("INVALID_ARGUMENT")
        self._gpm[nvml.handle_key(gpmSample)] = (gpu.index, t)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        """One GPU instance's GPM sample, on the parent handle (its SM activity is the instance's share of
        the GPU's, in this fake: the GPU's curve)."""
        gpu, t = self._device(device, "gpm")
        if gpu.mig is None or gpuInstanceId not in {i.gi_id for i in gpu.mig}:
            raise _err("INVALID_ARGUMENT")
        if nvml.handle_key(gpmSample) not in self._gpm:
            raise _err("INVALID_ARGUMENT")
        self._gpm[nvml.handle_key(gpmSample)] = (gpu.index, t)
        return gpmSample

    def _gpm_value(self, gpu: FakeGpu, metric: int, t: float) -> float | None:
        sm = gpu.sm_active
        if sm is None:
            return None
        if metric in (nvml.GPM_SM_UTIL, nvml.GPM_GRAPHICS_UTIL):
            return max(0.0, sm.at(t))
        if metric == nvml.GPM_ANY_TENSOR_UTIL:
            return max(0.0, gpu.tensor_active.at(t) if gpu.tensor_active is not None else 0.6 * sm.at(t))
        if metric == nvml.GPM_DRAM_BW_UTIL:
            return max(0.0, gpu.util_mem.at(t) if gpu.util_mem is not None else 0.6 * self.util(gpu, t))
        return None

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        """GPM activity of the GPU at the newer sample's time (the scenario's ``sm_active`` curve and what it
        implies for the tensor, DRAM and engine metrics)."""
        self._system()
        first = self._gpm.get(nvml.handle_key(metricsGet.sample1))
        second = self._gpm.get(nvml.handle_key(metricsGet.sample2))
        if first is None or second is None or first[0] != second[0]:
            raise _err("INVALID_ARGUMENT")
        gpu = self.scenario.gpus[second[0]]
        for i in range(metricsGet.numMetrics):
            m = metricsGet.metrics[i]
            value = self._gpm_value(gpu, int(m.metricId), second[1])
            if value is None:
                m.nvmlReturn = nvml.ERROR_CODES["NOT_SUPPORTED"]
            else:
                m.nvmlReturn, m.value = 0, value
        return metricsGet

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> _Obj:
        gpu, t = self._device(handle, "memory")
        if version:
            if "memory_v2" in gpu.errors:
                raise nvml.make_error(gpu.errors["memory_v2"])
            if version != nvml.MEMORY_V2:
                raise _err("ARGUMENT_VERSION_MISMATCH")
        if handle.mig is not None:
            inst = self._mig(gpu, handle)
            total, used, reserved = inst.memory_mib * MIB, int(inst.used_mib.at(t) * MIB), 0
        else:
            total, used = gpu.memory_total_mib * MIB, int(self.used_mib(gpu, t) * MIB)
            reserved = gpu.reserved_mib * MIB
        if version:
            return _Obj(
                version=version, total=total, reserved=reserved, free=total - reserved - used, used=used
            )
        return _Obj(
            total=total, free=total - reserved - used, used=used + reserved
        )  # v1: reserved counts as used

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu, t = self._device(handle, "temperature")
        if sensor != nvml.TEMPERATURE_GPU:
            raise _err("INVALID_ARGUMENT")
        return int(round(self.temp(gpu, t)))

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:
        """The versioned call (r530+); ``unsupported: [temperature_v]`` is a driver without the symbol."""
        gpu, _ = self._device(handle, "temperature_v")
        return self.nvmlDeviceGetTemperature(handle, sensor)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        """Millijoules since the driver loaded: the power curve integrated between reads."""
        gpu, t = self._device(handle, "energy")
        last_t, mj = self._energy.get(gpu.index, (0.0, 0.0))
        if t > last_t:
            mj += self.power_w(gpu, t) * (t - last_t) * 1000.0
            self._energy[gpu.index] = (t, mj)
        return int(mj)

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        gpu, _ = self._device(handle, "remapped_rows")
        corr, unc, pending, failed = gpu.remapped_rows
        return (corr, unc, int(pending), int(failed))

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[int]) -> list[_Obj]:
        """HBM temperature (field 82) and the GPU recovery action (field 230); others NOT_SUPPORTED."""
        gpu, t = self._device(handle, "field_values")
        out = []
        for fid in fieldIds:
            value: float | None = None
            if fid == 82:
                curve = gpu.memory_temperature
                value = curve.at(t) if curve is not None else self.temp(gpu, t) + 8
            elif fid == 230:
                value = gpu.recovery_action.at(t) if gpu.recovery_action is not None else 0
            rc = 0 if value is not None else nvml.ERROR_CODES["NOT_SUPPORTED"]
            out.append(_Obj(fieldId=fid, nvmlReturn=rc, valueType=1,
                            value=_Obj(uiVal=int(round(value or 0)))))
        return out

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        gpu, _ = self._device(handle, "thresholds")
        if threshold == nvml.THRESHOLD_SLOWDOWN:
            return gpu.temp_slowdown
        if threshold == nvml.THRESHOLD_SHUTDOWN:
            return gpu.temp_shutdown
        raise _err("NOT_SUPPORTED")

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu, t = self._device(handle, "power")
        return int(self.power_w(gpu, t) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        gpu, _ = self._device(handle, "power_limit")
        return int(gpu.power_limit_w * 1000)

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu, t = self._device(handle, "clocks")
        if type in (nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS):
            reasons = self.reasons(gpu, t)
            factor = 0.6 if reasons & nvml.THROTTLE_BITS["hw_thermal"] else 0.85 if reasons & 0x24 else 1.0
            if reasons & nvml.THROTTLE_BITS["gpu_idle"]:
                factor = 0.15
            return int(gpu.sm_clock_max * factor)
        if type == nvml.CLOCK_MEM:
            return gpu.mem_clock
        raise _err("NOT_SUPPORTED")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        gpu, t = self._device(handle, "throttle")
        if "clocks_event_reasons" in gpu.errors:
            raise nvml.make_error(gpu.errors["clocks_event_reasons"])
        return self.reasons(gpu, t)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        gpu, t = self._device(handle, "throttle")
        return self.reasons(gpu, t)

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        gpu, t = self._device(handle, "fan")
        if gpu.fan is not None:
            return int(gpu.fan.at(t))
        return int(max(30.0, min(100.0, 30.0 + (self.temp(gpu, t) - 30.0) * 1.5)))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu, t = self._device(handle, "ecc")
        curve = gpu.ecc_corrected if errorType == nvml.ECC_CORRECTED else gpu.ecc_uncorrected
        return int(curve.at(t))

    # ------------------------------------------------------------------ MIG

    def _mig(self, gpu: FakeGpu, handle: FakeHandle) -> FakeMig:
        if not gpu.mig or handle.mig is None or handle.mig >= len(gpu.mig):
            raise _err("INVALID_ARGUMENT")
        return gpu.mig[handle.mig]

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu, _ = self._device(device, "mig")
        mode = nvml.MIG_ENABLE if gpu.mig is not None else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu, _ = self._device(device, "mig")
        return 7 if gpu.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> FakeHandle:
        gpu, _ = self._device(device, "mig")
        if not gpu.mig or not 0 <= index < len(gpu.mig):
            raise _err("NOT_FOUND")
        return FakeHandle(gpu.index, mig=index)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        gpu, _ = self._device(device, "mig")
        return self._mig(gpu, device).gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        gpu, _ = self._device(device, "mig")
        return self._mig(gpu, device).ci_id

    # ------------------------------------------------------------------ processes

    def _procs(self, handle: Any, what: str, kinds: tuple[str, ...]) -> list[_Obj]:
        """The running-process list of a GPU or of one MIG device. On the parent of a MIG GPU, NVML lists
        (every instance's processes) only for a privileged caller; a MIG device lists its own."""
        gpu, t = self._device(handle, what)
        if gpu.mig is not None and handle.mig is None and not self.scenario.privileged:
            raise _err("NO_PERMISSION")
        inst = None if handle.mig is None else self._mig(gpu, handle)
        none = 0xFFFFFFFF
        return [
            _Obj(
                pid=p.pid,
                usedGpuMemory=int(p.memory_mib.at(t) * MIB),
                gpuInstanceId=none if gpu.mig is None else p.mig,
                computeInstanceId=none if gpu.mig is None else 0,
            )
            for p in gpu.running(t)
            if p.kind in kinds and (inst is None or p.mig == inst.gi_id)
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[_Obj]:
        return self._procs(handle, "processes", ("compute", "compute+graphics"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[_Obj]:
        return self._procs(handle, "graphics_processes", ("graphics", "compute+graphics"))

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[_Obj]:
        return self._procs(handle, "mps_processes", ("mps",))

    def sample_ts(self, t: float) -> int:
        """Process-utilization sample time (µs since the epoch), quantised to 100 ms like NVML's buffer."""
        return int(self.wall0 * 1e6) + int(t * 10) * 100_000

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[_Obj]:
        """Samples only for processes that ran kernels; NOT_FOUND when none did, or none since ``timeStamp``
        (NVML API reference). Not supported on a MIG GPU."""
        gpu, t = self._parent(handle, "process_util")
        now = self.sample_ts(t)
        live = [p for p in gpu.running(t) if not p.zombie(t) and round(p.sm(t)) > 0]
        if now <= timeStamp or not live:
            raise _err("NOT_FOUND")
        return [
            _Obj(
                pid=p.pid,
                timeStamp=now,
                smUtil=int(round(p.sm(t))),
                memUtil=int(round(p.sm(t) * 0.5)),
                encUtil=0,
                decUtil=0,
            )
            for p in live
        ]

    # ------------------------------------------------------------------ events

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._system()
        if not self.scenario.event_sets:
            raise _err("NOT_SUPPORTED")
        return FakeEventSet()

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._device(handle, "events")
        return int(nvml.EVENT_XID) | 0x3  # Xid, single- and double-bit ECC

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: FakeEventSet) -> None:
        gpu, _ = self._device(handle, "events")
        if eventTypes & nvml.EVENT_XID:
            eventSet.devices.add(gpu.index)

    def _due_event(self, es: FakeEventSet, t: float) -> _Obj | None:
        for gi in sorted(es.devices):
            for pos, (at, xid) in enumerate(self.scenario.gpus[gi].xids):
                if at <= t and (gi, pos) not in es.delivered:
                    es.delivered.add((gi, pos))
                    return _Obj(
                        device=self._handles[gi],
                        eventType=nvml.EVENT_XID,
                        eventData=xid,
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
        return None

    def _next_event_in(self, es: FakeEventSet, t: float) -> float:
        times = [
            at
            for gi in es.devices
            for pos, (at, _) in enumerate(self.scenario.gpus[gi].xids)
            if (gi, pos) not in es.delivered
        ]
        return max(0.0, min(times) - t) if times else math.inf

    def _lost_registered(self, es: FakeEventSet, t: float) -> bool:
        return any(self.scenario.gpus[gi].is_lost(t) for gi in es.devices)

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> _Obj:
        """The next Xid of a registered GPU; GPU_IS_LOST at once while any registered GPU is lost, as the
        driver answers (the caller must take the lost GPU out of the set, or never see another Xid)."""
        with self._lock:
            t = self._system()
            if self._lost_registered(eventSet, t):
                raise _err("GPU_IS_LOST")
            ev = self._due_event(eventSet, t)
            if ev is not None:
                return ev
            delay = min(timeoutms / 1000.0, self._next_event_in(eventSet, t))
        if delay > 0:
            self.sleep(delay)
        with self._lock:
            ev = self._due_event(eventSet, self._system())
        if ev is None:
            raise _err("TIMEOUT")
        return ev

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> _Obj:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        eventSet.devices.clear()
