"""A scenario-driven fake NVML, for tests and the demo: no GPU, no driver, any machine.

:class:`FakeNvml` has the same function names and signatures as ``pynvml`` and raises real
``pynvml.NVMLError`` instances, so :class:`gpufleet.agent.nvml.Gateway` runs the very same code (and error
mapping) as on hardware. Return objects carry the attribute names of pynvml's ctypes structs.

A scenario (YAML) describes GPUs, processes and a timeline; time is seconds since the backend started, from
an injectable clock so tests are deterministic. See ``agent/scenarios/README`` in the module docstring of
:mod:`gpufleet.agent.scenarios` for the format. PyYAML is imported only when a scenario is loaded.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
import uuid as uuidlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpufleet.agent import nvml
from gpufleet.agent import scenarios as bundled
from gpufleet.agent.errors import ScenarioError
from gpufleet.agent.procinfo import ProcInfo

MIB: Final = 1 << 20

#: Field names a scenario may list under a GPU's ``unsupported`` / ``errors``.
FIELDS: Final = frozenset(
    {
        "name",
        "serial",
        "pci",
        "utilization",
        "memory",
        "memory_v2",
        "temperature",
        "thresholds",
        "power",
        "power_limit",
        "clocks",
        "throttle",
        "clocks_event_reasons",
        "fan",
        "ecc",
        "mig",
        "processes",
        "processes_v3",
        "graphics_processes",
        "process_util",
        "events",
    }
)
#: Fields whose "unsupported" means the newer symbol is missing (an older driver), not NOT_SUPPORTED.
_MISSING_SYMBOL: Final = frozenset({"memory_v2", "processes_v3", "clocks_event_reasons"})


# ------------------------------------------------------------------------------------------- curves


@dataclass(slots=True)
class Curve:
    """A value over time: piecewise-linear (or step) through ``points``, repeating every ``loop`` s if set."""

    points: list[tuple[float, float]]
    step: bool = False
    loop: float | None = None

    @classmethod
    def const(cls, value: float) -> Curve:
        return cls([(0.0, float(value))])

    def at(self, t: float) -> float:
        pts = self.points
        if self.loop:
            t = t % self.loop
        if t <= pts[0][0]:
            return pts[0][1]
        if t >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_right(pts, t, key=lambda p: p[0])
        (t0, v0), (t1, v1) = pts[i - 1], pts[i]
        if self.step or t1 == t0:
            return v0
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


# ----------------------------------------------------------------------------------------- scenario


@dataclass(slots=True)
class FakeProcess:
    pid: int
    user: str
    uid: int
    command: str
    memory_mib: Curve
    sm_util: Curve
    kind: str = "compute"
    start_offset_s: float = -600.0  # when it started, relative to the backend start (negative: before)
    state: str = "S"
    ppid: int = 1
    container: str | None = None
    pod: str | None = None
    job: str | None = None
    hidden: bool = False  # /proc entry unreadable (hidepid): reported unattributed
    start_at: float | None = None  # appears on the GPU at this time (None: from the start)
    stop_at: float | None = None
    idle_at: float | None = None  # keeps its memory, stops using the GPU
    zombie_at: float | None = None  # becomes a zombie still holding its memory

    def present(self, t: float) -> bool:
        return (self.start_at is None or t >= self.start_at) and (self.stop_at is None or t < self.stop_at)

    def zombie(self, t: float) -> bool:
        return self.zombie_at is not None and t >= self.zombie_at

    def sm(self, t: float) -> float:
        if self.zombie(t) or (self.idle_at is not None and t >= self.idle_at):
            return 0.0
        return self.sm_util.at(t)


@dataclass(slots=True)
class FakeMig:
    gi_id: int
    ci_id: int
    profile: str | None
    memory_mib: int
    used_mib: Curve


@dataclass(slots=True)
class FakeGpu:
    index: int
    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    memory_total_mib: int
    reserved_mib: int
    power_limit_w: float
    idle_power_w: float
    temp_slowdown: int
    temp_shutdown: int
    sm_clock_max: int
    mem_clock: int
    util: Curve | None
    util_mem: Curve | None
    temperature: Curve | None
    power: Curve | None
    fan: Curve | None
    orphan_memory_mib: Curve
    ecc_corrected: Curve
    ecc_uncorrected: Curve
    mig: list[FakeMig] | None
    errors: dict[str, int]
    processes: list[FakeProcess]
    lost: list[tuple[float, float]] = field(default_factory=list)  # [from, until) intervals
    xids: list[tuple[float, int]] = field(default_factory=list)

    def is_lost(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.lost)

    def running(self, t: float) -> list[FakeProcess]:
        return [p for p in self.processes if p.present(t)]


@dataclass(slots=True)
class Scenario:
    source: str
    hostname: str
    driver_version: str
    nvml_version: str
    cuda_version: int
    gpus: list[FakeGpu]
    event_sets: bool = True
    driver_errors: list[tuple[float, float, int]] = field(default_factory=list)  # [from, until), code
    description: str = ""


class _Reader:
    """Typed access to the parsed YAML with errors that name the file and the key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ScenarioError:
        return ScenarioError(self.source, key, problem)

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, got {type(value).__name__}")
        return value

    def get(
        self, m: dict[str, Any], name: str, key: str, kinds: tuple[type, ...], default: Any = None
    ) -> Any:
        value = m.get(name)
        if value is None:
            return default
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(f"{key}.{name}", "must be a number, got a boolean")
        if not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.fail(f"{key}.{name}", f"must be {names}, got {type(value).__name__}")
        return value

    def number(self, m: dict[str, Any], name: str, key: str, default: float | None = None) -> float | None:
        value = self.get(m, name, key, (int, float), default)
        return None if value is None else float(value)

    def curve(self, m: dict[str, Any], name: str, key: str) -> Curve | None:
        value = m.get(name)
        where = f"{key}.{name}"
        if value is None:
            return None
        step, loop = False, None
        if isinstance(value, dict):
            step = bool(value.get("step", False))
            loop = self.number(value, "loop", where)
            if loop is not None and loop <= 0:
                raise self.fail(f"{where}.loop", "must be > 0")
            value = value.get("points")
            where = f"{where}.points"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Curve.const(float(value))
        if not isinstance(value, list) or not value:
            raise self.fail(
                where, "must be a number, a list of [seconds, value] pairs, or {points, step, loop}"
            )
        pts: list[tuple[float, float]] = []
        for i, p in enumerate(value):
            ok = isinstance(p, (list, tuple)) and len(p) == 2
            if not ok or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p):
                raise self.fail(f"{where}[{i}]", "must be a [seconds, value] pair of numbers")
            if pts and float(p[0]) < pts[-1][0]:
                raise self.fail(f"{where}[{i}]", "times must not decrease")
            pts.append((float(p[0]), float(p[1])))
        return Curve(pts, step=step, loop=loop)


def _error_code(r: _Reader, name: Any, key: str) -> int:
    if not isinstance(name, str) or name.upper().removeprefix("NVML_ERROR_") not in nvml.ERROR_CODES:
        raise r.fail(key, f"unknown NVML error {name!r} (e.g. NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST)")
    return int(nvml.ERROR_CODES[name.upper().removeprefix("NVML_ERROR_")])


def _uid_for(user: str) -> int:
    return 1000 + zlib.crc32(user.encode()) % 9000


def _parse_process(r: _Reader, raw: Any, key: str) -> FakeProcess:
    m = r.mapping(raw, key)
    pid = r.get(m, "pid", key, (int,))
    if pid is None or pid <= 0:
        raise r.fail(f"{key}.pid", "required, a positive integer")
    user = r.get(m, "user", key, (str,), "root")
    kind = r.get(m, "kind", key, (str,), "compute")
    if kind not in ("compute", "graphics", "compute+graphics"):
        raise r.fail(f"{key}.kind", "must be compute, graphics or compute+graphics")
    state = r.get(m, "state", key, (str,), "S")
    if len(state) != 1:
        raise r.fail(f"{key}.state", "must be one /proc state letter (R, S, D, Z, T)")
    job = m.get("job")
    return FakeProcess(
        pid=pid,
        user=user,
        uid=r.get(m, "uid", key, (int,), _uid_for(user)),
        command=r.get(m, "command", key, (str,), "python"),
        memory_mib=r.curve(m, "memory_mib", key) or Curve.const(0),
        sm_util=r.curve(m, "sm_util", key) or Curve.const(0),
        kind=kind,
        start_offset_s=r.number(m, "start_offset_s", key, -600.0) or 0.0,
        state=state,
        ppid=r.get(m, "ppid", key, (int,), 1),
        container=r.get(m, "container", key, (str,)),
        pod=r.get(m, "pod", key, (str,)),
        job=None if job is None else str(job),
        hidden=bool(r.get(m, "hidden", key, (bool,), False)),
        start_at=r.number(m, "start_at", key),
        stop_at=r.number(m, "stop_at", key),
        idle_at=r.number(m, "idle_at", key),
        zombie_at=r.number(m, "zombie_at", key),
    )


def _parse_mig(r: _Reader, raw: Any, key: str) -> list[FakeMig]:
    m = r.mapping(raw, key)
    out = []
    for i, inst in enumerate(r.get(m, "instances", key, (list,), [])):
        k = f"{key}.instances[{i}]"
        im = r.mapping(inst, k)
        out.append(
            FakeMig(
                gi_id=r.get(im, "gi_id", k, (int,), i + 1),
                ci_id=r.get(im, "ci_id", k, (int,), 0),
                profile=r.get(im, "profile", k, (str,)),
                memory_mib=r.get(im, "memory_mib", k, (int,), 10240),
                used_mib=r.curve(im, "used_mib", k) or Curve.const(0),
            )
        )
    return out


def _parse_gpu(r: _Reader, raw: Any, index: int, hostname: str) -> FakeGpu:
    key = f"gpus[{index}]"
    m = r.mapping(raw, key)
    total = r.get(m, "memory_total_mib", key, (int,), 81920)
    if total <= 0:
        raise r.fail(f"{key}.memory_total_mib", "must be > 0")
    limit = r.number(m, "power_limit_w", key, 400.0) or 400.0
    slowdown = int(r.number(m, "temp_slowdown", key, 87) or 87)
    uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{hostname}/gpu{index}"))
    errors: dict[str, int] = {}
    for i, name in enumerate(r.get(m, "unsupported", key, (list,), [])):
        if name not in FIELDS:
            raise r.fail(
                f"{key}.unsupported[{i}]", f"unknown field {name!r}; known: {', '.join(sorted(FIELDS))}"
            )
        errors[name] = nvml.ERROR_CODES["FUNCTION_NOT_FOUND" if name in _MISSING_SYMBOL else "NOT_SUPPORTED"]
    for name, code in r.mapping(m.get("errors") or {}, f"{key}.errors").items():
        if name not in FIELDS:
            raise r.fail(f"{key}.errors.{name}", f"unknown field; known: {', '.join(sorted(FIELDS))}")
        errors[name] = _error_code(r, code, f"{key}.errors.{name}")
    procs = [
        _parse_process(r, p, f"{key}.processes[{i}]")
        for i, p in enumerate(r.get(m, "processes", key, (list,), []))
    ]
    mig = _parse_mig(r, m["mig"], f"{key}.mig") if m.get("mig") else None
    return FakeGpu(
        index=index,
        name=r.get(m, "name", key, (str,), "NVIDIA A100-SXM4-80GB"),
        uuid=r.get(m, "uuid", key, (str,), f"GPU-{uid}"),
        serial=str(r.get(m, "serial", key, (str, int), 1320000000000 + zlib.crc32(uid.encode()) % 10**9)),
        pci_bus_id=r.get(m, "pci_bus_id", key, (str,), f"00000000:{0x07 + 0x10 * index:02X}:00.0"),
        memory_total_mib=total,
        reserved_mib=r.get(m, "reserved_mib", key, (int,), max(1, total // 160)),
        power_limit_w=limit,
        idle_power_w=r.number(m, "idle_power_w", key, round(limit * 0.15)) or 0.0,
        temp_slowdown=slowdown,
        temp_shutdown=int(r.number(m, "temp_shutdown", key, slowdown + 5) or 0),
        sm_clock_max=r.get(m, "sm_clock_max", key, (int,), 1410),
        mem_clock=r.get(m, "mem_clock", key, (int,), 1593),
        util=r.curve(m, "util", key),
        util_mem=r.curve(m, "util_mem", key),
        temperature=r.curve(m, "temperature", key),
        power=r.curve(m, "power_w", key),
        fan=r.curve(m, "fan", key),
        orphan_memory_mib=r.curve(m, "orphan_memory_mib", key) or Curve.const(0),
        ecc_corrected=r.curve(m, "ecc_corrected", key) or Curve.const(0),
        ecc_uncorrected=r.curve(m, "ecc_uncorrected", key) or Curve.const(0),
        mig=mig,
        errors=errors,
        processes=procs,
    )


def _apply_timeline(r: _Reader, sc: Scenario, raw: Any) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        raise r.fail("timeline", "must be a list of {at, ...} entries")
    pending_lost: dict[int, float] = {}
    by_pid = {p.pid: p for g in sc.gpus for p in g.processes}
    entries = []
    for i, e in enumerate(raw):
        key = f"timeline[{i}]"
        m = r.mapping(e, key)
        at = r.number(m, "at", key)
        if at is None:
            raise r.fail(f"{key}.at", "required (seconds since start)")
        entries.append((at, i, key, m))
    for at, _, key, m in sorted(entries, key=lambda x: (x[0], x[1])):
        what = m.get("event", m.get("action"))
        if what is None and "xid" in m:
            what = "xid"
        if what in ("start", "stop", "idle", "zombie"):
            pid = r.get(m, "pid", key, (int,))
            if pid not in by_pid:
                raise r.fail(f"{key}.pid", f"no process with pid {pid} in gpus[].processes")
            setattr(by_pid[pid], f"{what}_at", at)
            continue
        if what == "driver_error":
            code = _error_code(r, m.get("code", "DRIVER_NOT_LOADED"), f"{key}.code")
            duration = r.number(m, "duration", key, math.inf) or math.inf
            sc.driver_errors.append((at, at + duration, code))
            continue
        if what not in ("lost", "recover", "xid"):
            raise r.fail(
                f"{key}.event",
                f"unknown event {what!r} (start, stop, idle, zombie, lost, recover, xid, driver_error)",
            )
        gi = r.get(m, "gpu", key, (int,))
        if gi is None or not 0 <= gi < len(sc.gpus):
            raise r.fail(f"{key}.gpu", f"required, a GPU index 0..{len(sc.gpus) - 1}")
        gpu = sc.gpus[gi]
        if what == "xid":
            xid = r.get(m, "xid", key, (int,))
            if xid is None:
                raise r.fail(f"{key}.xid", "required for an xid event")
            gpu.xids.append((at, xid))
        elif what == "lost":
            pending_lost.setdefault(gi, at)
        elif gi in pending_lost:
            gpu.lost.append((pending_lost.pop(gi), at))
    for gi, at in pending_lost.items():
        sc.gpus[gi].lost.append((at, math.inf))


def parse_scenario(data: Any, source: str, hostname: str | None = None) -> Scenario:
    r = _Reader(source)
    m = r.mapping(data, "")
    host = hostname or r.get(m, "hostname", "", (str,)) or "fake-" + Path(source).stem
    gpus_raw = r.get(m, "gpus", "", (list,))
    if not gpus_raw:
        raise r.fail("gpus", "required, a non-empty list")
    cuda = r.get(m, "cuda_version", "", (int,), 12040)
    sc = Scenario(
        source=source,
        hostname=host,
        driver_version=str(r.get(m, "driver_version", "", (str, int, float), "550.54.15")),
        nvml_version=str(r.get(m, "nvml_version", "", (str,), "12.550.54.15")),
        cuda_version=cuda,
        gpus=[_parse_gpu(r, g, i, host) for i, g in enumerate(gpus_raw)],
        event_sets=bool(r.get(m, "event_sets", "", (bool,), True)),
        description=r.get(m, "description", "", (str,), ""),
    )
    pids = [p.pid for g in sc.gpus for p in g.processes]
    dup = {p for p in pids if pids.count(p) > 1}
    if dup:
        raise r.fail("gpus[].processes", f"pid {min(dup)} appears more than once")
    _apply_timeline(r, sc, m.get("timeline"))
    return sc


def load_scenario(source: str, hostname: str | None = None) -> Scenario:
    """A scenario from a YAML file path or a bundled name ("wasting"). Raises ScenarioError."""
    import yaml  # lazy: the agent on real hardware never needs PyYAML

    if os.path.exists(source):
        where, text = source, None
    elif source in bundled.names():
        where, text = f"{source} (bundled)", bundled.read(source)
    else:
        raise ScenarioError(
            source, "", f"no such file, and not a bundled scenario ({', '.join(bundled.names())})"
        )
    try:
        if text is None:
            text = Path(source).read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ScenarioError(where, "", f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(where, "", f"invalid YAML: {exc}") from None
    return parse_scenario(data, where, hostname)


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


def _unversioned(v3: Callable[[Any], list[_Obj]], handle: Any) -> list[_Obj]:
    """An unversioned process call as pynvml makes it: the _v3 symbol, and where that is missing the
    library-mismatch error rather than FUNCTION_NOT_FOUND."""
    try:
        return v3(handle)
    except nvml.NVMLError as exc:
        if int(getattr(exc, "value", 0)) == nvml.ERROR_CODES["FUNCTION_NOT_FOUND"]:
            raise nvml.library_mismatch(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            ) from None
        raise


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
        if gpu.is_lost(t):
            raise _err("GPU_IS_LOST")
        code = gpu.errors.get(what)
        if code is not None:
            raise nvml.make_error(code)
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
        self._system()
        if not 0 <= index < len(self._handles):
            raise _err("INVALID_ARGUMENT")
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
        gpu, t = self._device(handle, "utilization")
        u = self.util(gpu, t)
        mu = gpu.util_mem.at(t) if gpu.util_mem is not None else u * 0.6
        return _Obj(gpu=int(round(u)), memory=int(round(mu)))

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
        gpu, t = self._device(handle, what)
        return [
            _Obj(
                pid=p.pid,
                usedGpuMemory=int(p.memory_mib.at(t) * MIB),
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for p in gpu.running(t)
            if p.kind in kinds
        ]

    def _v3(self, handle: Any) -> None:
        gpu, _ = self._device(handle, "processes")
        if "processes_v3" in gpu.errors:
            raise nvml.make_error(gpu.errors["processes_v3"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[_Obj]:
        return _unversioned(self.nvmlDeviceGetComputeRunningProcesses_v3, handle)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[_Obj]:
        self._v3(handle)
        return self._procs(handle, "processes", ("compute", "compute+graphics"))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[_Obj]:
        return self._procs(handle, "processes", ("compute", "compute+graphics"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[_Obj]:
        return _unversioned(self.nvmlDeviceGetGraphicsRunningProcesses_v3, handle)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[_Obj]:
        self._v3(handle)
        return self._procs(handle, "graphics_processes", ("graphics", "compute+graphics"))

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[_Obj]:
        return self._procs(handle, "graphics_processes", ("graphics", "compute+graphics"))

    def sample_ts(self, t: float) -> int:
        """Process-utilization sample time (µs since the epoch), quantised to 100 ms like NVML's buffer."""
        return int(self.wall0 * 1e6) + int(t * 10) * 100_000

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[_Obj]:
        gpu, t = self._device(handle, "process_util")
        now = self.sample_ts(t)
        live = [p for p in gpu.running(t) if not p.zombie(t)]
        if now <= timeStamp or not live:
            raise _err("NOT_FOUND")  # what real NVML answers when there are no new samples
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

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> _Obj:
        with self._lock:
            t = self._system()
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


# --------------------------------------------------------------------------------- fake /proc source


class FakeProcs:
    """Process attribution answered from the scenario, so ``--fake`` works on any machine."""

    def __init__(self, lib: FakeNvml) -> None:
        self.lib = lib

    def lookup(self, pid: int) -> ProcInfo:
        t = self.lib.elapsed()
        for gpu in self.lib.scenario.gpus:
            for p in gpu.processes:
                if p.pid != pid or not p.present(t):
                    continue
                if p.hidden:
                    return ProcInfo(pid, status="denied")
                start = p.start_at if p.start_at is not None else p.start_offset_s
                state = "Z" if p.zombie(t) else p.state
                return ProcInfo(
                    pid,
                    user=p.user,
                    uid=p.uid,
                    command=p.command,
                    start_time=self.lib.wall0 + start,
                    state=state,
                    ppid=p.ppid,
                    container=p.container,
                    pod=p.pod,
                    job=p.job,
                )
        return ProcInfo(pid, status="missing")

    def hides_pids(self) -> bool:
        return False

    def forget(self, live_pids: set[int]) -> None:
        return None
