"""Fake scenarios: GPUs, processes and a timeline read from YAML, as plain data with curves over time.

The model and its loader, kept apart from the fake NVML (:mod:`gpufleet.agent.fake.nvml`) that answers
from it, so a scenario can be checked (``ScenarioError`` with the key at fault) without a backend.
Time is seconds since the backend started. See :mod:`gpufleet.agent.scenarios` for the format; PyYAML
is imported only when a scenario is loaded. Stdlib only, like the whole agent.
"""

from __future__ import annotations

import bisect
import math
import os
import uuid as uuidlib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpufleet.agent import nvml
from gpufleet.agent import scenarios as bundled
from gpufleet.agent.errors import ScenarioError

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
        "graphics_processes",
        "mps_processes",
        "process_util",
        "events",
        "gpm",
        "handle",
        "temperature_v",
        "field_values",
        "remapped_rows",
        "energy",
    }
)
#: Fields whose "unsupported" means the newer symbol is missing (an older driver), not NOT_SUPPORTED.
_MISSING_SYMBOL: Final = frozenset({"memory_v2", "clocks_event_reasons", "temperature_v"})


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
    kind: str = "compute"  # compute | graphics | compute+graphics | mps (an MPS client)
    mig: int | None = None  # the MIG GPU instance it runs in (gi_id), on a GPU in MIG mode
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
    sm_active: Curve | None  # GPM SM activity %; None: the GPU has no GPM (pre-Hopper)
    temperature: Curve | None
    power: Curve | None
    fan: Curve | None
    orphan_memory_mib: Curve
    ecc_corrected: Curve
    ecc_uncorrected: Curve
    mig: list[FakeMig] | None
    errors: dict[str, int]
    processes: list[FakeProcess]
    tensor_active: Curve | None = None  # GPM tensor activity %; None: 60 % of sm_active
    memory_temperature: Curve | None = None  # HBM Celsius; None: 8 degrees above the GPU
    recovery_action: Curve | None = None  # nvmlDeviceGpuRecoveryAction_t over time; None: 0 (none)
    remapped_rows: tuple[int, int, bool, bool] = (0, 0, False, False)  # corr., uncorr., pending, failed
    lost: list[tuple[float, float]] = field(default_factory=list)  # [from, until) intervals
    hangs: list[tuple[float, float]] = field(default_factory=list)  # [from, until): every call blocks
    xids: list[tuple[float, int]] = field(default_factory=list)

    def is_lost(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.lost)

    def is_hung(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.hangs)

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
    #: The caller is root. The documented deployment runs the agent as an unprivileged user, and NVML lists
    #: a MIG GPU's processes on its parent handle only for privileged callers (NVML API reference).
    privileged: bool = False
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
    if kind not in ("compute", "graphics", "compute+graphics", "mps"):
        raise r.fail(f"{key}.kind", "must be compute, graphics, compute+graphics or mps")
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
        mig=r.get(m, "mig", key, (int,)),
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
    if mig is not None:
        ids = {inst.gi_id for inst in mig}
        for i, p in enumerate(procs):
            if p.mig not in ids:
                raise r.fail(f"{key}.processes[{i}].mig",
                             f"required on a GPU in MIG mode: one of the instances' gi_id {sorted(ids)}")
    remap = r.mapping(m.get("remapped_rows") or {}, f"{key}.remapped_rows")
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
        sm_active=r.curve(m, "sm_active", key),
        temperature=r.curve(m, "temperature", key),
        power=r.curve(m, "power_w", key),
        fan=r.curve(m, "fan", key),
        orphan_memory_mib=r.curve(m, "orphan_memory_mib", key) or Curve.const(0),
        ecc_corrected=r.curve(m, "ecc_corrected", key) or Curve.const(0),
        ecc_uncorrected=r.curve(m, "ecc_uncorrected", key) or Curve.const(0),
        mig=mig,
        errors=errors,
        processes=procs,
        tensor_active=r.curve(m, "tensor_active", key),
        memory_temperature=r.curve(m, "memory_temperature", key),
        recovery_action=r.curve(m, "recovery_action", key),
        remapped_rows=(
            r.get(remap, "correctable", f"{key}.remapped_rows", (int,), 0),
            r.get(remap, "uncorrectable", f"{key}.remapped_rows", (int,), 0),
            bool(r.get(remap, "pending", f"{key}.remapped_rows", (bool,), False)),
            bool(r.get(remap, "failed", f"{key}.remapped_rows", (bool,), False)),
        ),
    )


def _apply_timeline(r: _Reader, sc: Scenario, raw: Any) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        raise r.fail("timeline", "must be a list of {at, ...} entries")
    pending_lost: dict[int, float] = {}
    pending_hang: dict[int, float] = {}
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
        if what not in ("lost", "recover", "xid", "hang", "unhang"):
            raise r.fail(
                f"{key}.event",
                f"unknown event {what!r} (start, stop, idle, zombie, lost, recover, hang, unhang, xid, "
                "driver_error)",
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
        elif what == "hang":
            pending_hang.setdefault(gi, at)
        elif what == "unhang" and gi in pending_hang:
            gpu.hangs.append((pending_hang.pop(gi), at))
        elif what == "recover" and gi in pending_lost:
            gpu.lost.append((pending_lost.pop(gi), at))
    for gi, at in pending_lost.items():
        sc.gpus[gi].lost.append((at, math.inf))
    for gi, at in pending_hang.items():
        sc.gpus[gi].hangs.append((at, math.inf))


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
        privileged=bool(r.get(m, "privileged", "", (bool,), False)),
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
