"""One GPU's readings for one sample: what the sampler remembers about a GPU, and how it reads it.

Tiered: utilization, memory, processes, temperature, power, clocks, throttle reasons, fan and GPM activity
every interval; the energy counter and the health fields (HBM temperature, GPU recovery action) every
``medium_every`` seconds (5), and at once after an Xid on the GPU; names, serials, thresholds, power limit,
ECC counts, remapped rows and the MIG layout every ``slow_every`` seconds (cached in between).

Why the middle tier (issue 33: the agent's CPU per sample within 1.1x a minimal loop, after issue 32 added
these two NVML calls per GPU per sample): the operator loses nothing. The energy counter counts every
millijoule whenever it is read (a reading 5 s old undercounts nothing, it is only 5 s old); HBM temperature
follows the memory's heat, which moves over tens of seconds, and no rule reads it; the recovery action
changes when the driver says so with Xid 154 (and after the critical Xids that need a reset), and an Xid on
the GPU refreshes the tier at the next sample (:meth:`Sampler.xid_seen`). Every read goes through the
gateway, so a field that fails is null and named in the GPU's ``read_errors`` (agent/nvml/codes.py decides
what fails, what is missing and what means the GPU is gone).

MIG (NVML API reference, "Multi-Instance GPU Management"): the parent's utilization and per-process
utilization are not supported in MIG mode (nvitop issue #5) and its process list needs privileges the
documented non-root agent does not have, so processes are read per MIG device (each tagged with its GPU and
compute instance) and GPM per GPU instance (nvmlGpmMigSampleGet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent import nvml
from gpufleet.agent.errors import GpuLostError, GpuUnreadable
from gpufleet.agent.wire import GpuSample, MigInstance, ProcessSample


@dataclass(slots=True)
class GpuState:
    """What the sampler remembers about one GPU between intervals."""

    index: int
    handle: Any | None
    uuid: str
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    power_limit: float | None = None
    temp_slowdown: int | None = None
    temp_shutdown: int | None = None
    memory_total: int | None = None  # from the last sample (hello reads it, with no NVML call of its own)
    ecc: tuple[int | None, int | None] = (None, None)
    remapped: nvml.RemappedRows | None = None
    mig_mode: bool | None = None
    mig: list[tuple[Any, MigInstance]] = field(default_factory=list)
    slow_at: float | None = None  # monotonic time of the last slow-tier refresh
    slow_failed: dict[str, str] = field(default_factory=dict)  # slow-tier read errors, until the next refresh
    medium_at: float | None = None  # monotonic time of the last middle-tier refresh (None: due now)
    medium_failed: dict[str, str] = field(default_factory=dict)  # its read errors, until the next refresh
    health: tuple[int | None, str | None] = (None, None)  # HBM temperature, recovery action (middle tier)
    energy_mj: int | None = None  # the energy counter (middle tier)
    proc_ts: int = 0  # last-seen process-utilization timestamp (µs), passed back to NVML
    proc_util: dict[int, tuple[int, int, float]] = field(default_factory=dict)  # pid -> (sm, mem, seen at)
    fault: str | None = None  # "lost" | "unreadable" | "hung" while the GPU cannot be read
    error: str | None = None  # the text that goes with ``fault``
    fault_reported: bool = False  # the gpu_lost / gpu_hung event for this fault went out
    all_failed: int = 0  # consecutive samples in which every reading failed
    gpm: nvml.GpmState | None = None  # GPM sample buffers (Hopper+); None: not supported or not probed
    gpm_probed: bool = False
    gpm_mig: dict[int, nvml.GpmState] = field(default_factory=dict)  # GPU instance id -> its GPM buffers


def open_handle(gw: nvml.Gateway, g: GpuState) -> None:
    """(Re)open the GPU's handle. On failure the handle stays None: ``fault`` "lost" when NVML says the GPU
    is gone, "unreadable" when the agent may not open it (NO_PERMISSION); any other code leaves ``fault``
    alone and ``error`` names it (a failed read, counted towards "every reading failed")."""
    try:
        g.handle = gw.handle(g.index)
    except GpuLostError as exc:
        g.handle, g.fault, g.error = None, "lost", str(exc)
    except GpuUnreadable as exc:
        g.handle, g.error = None, str(exc)
        if exc.code == nvml.ERROR_CODES["NO_PERMISSION"]:
            g.fault = "unreadable"


def refresh_slow(gw: nvml.Gateway, g: GpuState, now: float) -> None:
    h = g.handle
    g.slow_at = now
    log = gw.begin_reads()
    uuid = gw.uuid(h)
    if uuid:
        g.uuid = uuid
    g.name = gw.name(h) or g.name
    g.serial = gw.serial(h) or g.serial
    g.pci_bus_id = gw.pci_bus_id(h) or g.pci_bus_id
    g.power_limit = gw.power_limit(h)
    g.temp_slowdown = gw.temp_threshold(h, nvml.THRESHOLD_SLOWDOWN)
    g.temp_shutdown = gw.temp_threshold(h, nvml.THRESHOLD_SHUTDOWN)
    g.ecc = gw.ecc_volatile(h)
    g.remapped = gw.remapped_rows(h)
    mem = gw.memory(h)
    if mem is not None and mem.total is not None:
        g.memory_total = mem.total
    g.mig_mode = gw.mig_mode(h)
    g.mig = []
    if g.mig_mode:
        for mh in gw.mig_handles(h):
            inst = gw.mig_instance(mh)
            if inst is not None:
                g.mig.append((mh, inst))
    g.slow_failed = dict(log.failed)


#: Seconds between two reads of the middle tier (module docstring).
MEDIUM_EVERY = 5.0


def read_gpu(gw: nvml.Gateway, g: GpuState, now: float, slow_every: float, util_hold: float,
             medium_every: float = MEDIUM_EVERY) -> GpuSample:
    """One sample of one GPU. Raises GpuLostError (NVML says it is gone) and GpuUnreadable (no handle);
    field failures are in the sample's ``read_errors`` and, when nothing answered, in
    ``GpuState.all_failed``."""
    if g.handle is None:
        open_handle(gw, g)
        if g.handle is None:
            raise GpuUnreadable(g.error or "GPU handle unavailable")
    if g.slow_at is None or now - g.slow_at >= slow_every:
        refresh_slow(gw, g, now)
    h = g.handle
    log = gw.begin_reads()
    if g.medium_at is None or now - g.medium_at >= medium_every:  # the middle tier (module docstring)
        g.medium_at = now
        g.health = gw.health_fields(h)
        g.energy_mj = gw.energy(h)
        g.medium_failed = dict(log.failed)
    util_gpu, util_mem = gw.utilization(h)
    mem = gw.memory(h)
    memory_temp, recovery = g.health
    if mem is not None and mem.total is not None:
        g.memory_total = mem.total
    remap = g.remapped
    s = GpuSample(
        index=g.index,
        uuid=g.uuid,
        name=g.name,
        serial=g.serial,
        pci_bus_id=g.pci_bus_id,
        util_gpu=None if util_gpu is None else max(0, min(100, util_gpu)),
        util_mem=None if util_mem is None else max(0, min(100, util_mem)),
        memory_total=None if mem is None else mem.total,
        memory_used=None if mem is None else mem.used,
        memory_reserved=None if mem is None else mem.reserved,
        temperature=gw.temperature(h),
        temp_slowdown=g.temp_slowdown,
        temp_shutdown=g.temp_shutdown,
        power_draw=gw.power_draw(h),
        power_limit=g.power_limit,
        clock_sm=gw.clock(h, nvml.CLOCK_SM),
        clock_mem=gw.clock(h, nvml.CLOCK_MEM),
        throttle_reasons=gw.throttle_reasons(h),
        fan_speed=gw.fan_speed(h),
        ecc_corrected=g.ecc[0],
        ecc_uncorrected=g.ecc[1],
        mig_mode=g.mig_mode,
        memory_temperature=memory_temp,
        energy_mj=g.energy_mj,
        recovery_action=recovery,
        remapped_correctable=None if remap is None else remap.correctable,
        remapped_uncorrectable=None if remap is None else remap.uncorrectable,
        remap_pending=None if remap is None else remap.pending,
        remap_failed=None if remap is None else remap.failed,
    )
    if g.mig:
        _read_mig(gw, g, s)
    else:
        _gpm(gw, g, s)
        _read_processes(gw, g, s, now, util_hold)
    failed = {**g.slow_failed, **g.medium_failed, **log.failed}
    s.read_errors = failed or None
    g.all_failed = g.all_failed + 1 if log.ok == 0 and log.failed else 0
    return s


def _gpm(gw: nvml.Gateway, g: GpuState, s: GpuSample) -> None:
    """GPM activity over the last interval, where the GPU has GPM (probed once per handle)."""
    if not g.gpm_probed:
        g.gpm_probed = True
        g.gpm = gw.gpm_open(g.handle)
    if g.gpm is None:
        return
    reading = gw.gpm_activity(g.handle, g.gpm)
    if g.gpm.cur is None:
        g.gpm = None  # GPM sampling is not available after all: stop asking
    if reading is not None:
        s.sm_active, s.tensor_active = reading.sm_active, reading.tensor_active
        s.dram_active, s.gr_active = reading.dram_active, reading.gr_active


def _read_mig(gw: nvml.Gateway, g: GpuState, s: GpuSample) -> None:
    """MIG mode: instances with their memory and GPM activity; processes per MIG device."""
    if not g.gpm_probed:
        g.gpm_probed = True
        for _, inst in g.mig:
            state = gw.gpm_open(g.handle, gi_id=inst.gi_id)
            if state is not None:
                g.gpm_mig[inst.gi_id] = state
    errors: list[str] = []
    for mh, inst in g.mig:
        m = gw.memory(mh)
        gpm = g.gpm_mig.get(inst.gi_id)
        activity = None if gpm is None else gw.gpm_activity(g.handle, gpm)
        if gpm is not None and gpm.cur is None:
            del g.gpm_mig[inst.gi_id]
        s.mig_instances.append(MigInstance(
            gi_id=inst.gi_id, ci_id=inst.ci_id, uuid=inst.uuid, profile=inst.profile,
            memory_total=inst.memory_total if m is None else m.total,
            memory_used=None if m is None else m.used,
            sm_active=None if activity is None else activity.sm_active))
        listed = gw.processes(mh)
        if listed.error is not None:
            errors.append(listed.error)
            continue
        for p in listed.processes:
            s.processes.append(ProcessSample(
                pid=p.pid, kind=p.kind, gpu_memory=p.used_memory,
                gi_id=inst.gi_id if p.gi_id is None else p.gi_id,
                ci_id=inst.ci_id if p.ci_id is None else p.ci_id))
    if errors:
        s.processes_error = errors[0]


def _read_processes(gw: nvml.Gateway, g: GpuState, s: GpuSample, now: float, util_hold: float) -> None:
    listed = gw.processes(g.handle)
    if listed.error is not None:
        s.processes_error = listed.error
        g.proc_util.clear()
        return
    raw = listed.processes
    if not raw:
        g.proc_util.clear()
        return
    pu = gw.process_util(g.handle, g.proc_ts)
    if pu is not None:
        g.proc_ts = pu.last_ts
        for pid, (pid_sm, pid_mu) in pu.by_pid.items():
            g.proc_util[pid] = (pid_sm, pid_mu, now)
    live = {p.pid for p in raw}
    for pid in [p for p in g.proc_util if p not in live]:
        del g.proc_util[pid]
    for p in raw:
        seen = g.proc_util.get(p.pid)
        sm: int | None
        mu: int | None
        if seen is not None and now - seen[2] <= util_hold:
            sm, mu = seen[0], seen[1]
        elif pu is not None:
            sm, mu = 0, 0  # no sample in the window: the process ran no kernels
        else:
            sm = mu = None  # per-process utilization not supported here: unknown
        s.processes.append(ProcessSample(pid=p.pid, kind=p.kind, gpu_memory=p.used_memory, sm_util=sm,
                                         mem_util=mu, gi_id=p.gi_id, ci_id=p.ci_id))


def drop_gpm(gw: nvml.Gateway, g: GpuState) -> None:
    """Free the GPU's GPM buffers (a re-init probes GPM afresh with the new handles)."""
    for state in [g.gpm, *g.gpm_mig.values()]:
        if state is not None:
            try:
                gw.gpm_free(state)
            except Exception:  # noqa: BLE001 - a lost GPU or driver: the buffers go with it
                pass
    g.gpm, g.gpm_probed, g.gpm_mig = None, False, {}
