"""Turns gateway readings into wire frames: one :class:`Snapshot` per call, plus the events it implies.

Tiered sampling (NVML calls cost time on every host, every interval): utilization, memory, processes,
temperature, power, clocks, throttle reasons, fan and GPM SM activity (Hopper+) every interval; names,
serials, thresholds, power limit, ECC counts and the MIG layout every ``slow_every`` seconds (cached in
between). Handles stay open.

A GPU that stops answering becomes a :class:`GpuSample` with ``error`` set, the rest of the snapshot still
goes out, and one ``gpu_lost`` event is produced per loss (not per interval). A driver failure propagates
as :class:`DriverError`; the caller re-initialises with :meth:`Sampler.reopen`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent import nvml
from gpufleet.agent.errors import DriverError, GpuLostError, NvmlUnavailable
from gpufleet.agent.procinfo import ProcInfo, ProcSource
from gpufleet.agent.slurm import SlurmResolver
from gpufleet.agent.wire import (
    MAX_LINE_BYTES,
    Event,
    GpuInfo,
    GpuSample,
    Hello,
    MigInstance,
    ProcessSample,
    Snapshot,
    encode,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Gpu:
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
    ecc: tuple[int | None, int | None] = (None, None)
    mig_mode: bool | None = None
    mig: list[tuple[Any, MigInstance]] = field(default_factory=list)
    slow_at: float | None = None  # monotonic time of the last slow-tier refresh
    proc_ts: int = 0  # last-seen process-utilization timestamp (µs), passed back to NVML
    proc_util: dict[int, tuple[int, int, float]] = field(default_factory=dict)  # pid -> (sm, mem, seen at)
    lost: str | None = None  # error text while the GPU is lost
    lost_reported: bool = False
    gpm: nvml.GpmState | None = None  # GPM sample buffers (Hopper+); None: not supported or not probed
    gpm_probed: bool = False


class Sampler:
    """Reads every GPU through a :class:`nvml.Gateway` and attributes processes through a ProcSource."""

    def __init__(
        self,
        gateway: nvml.Gateway,
        procs: ProcSource,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        slow_every: float = 30.0,
        util_hold: float = 3.0,
        driver_check: Callable[[], str | None] | None = None,
        slurm: SlurmResolver | None = None,
    ) -> None:
        self.gw = gateway
        self.procs = procs
        self.clock = clock
        self.wall = wall
        self.slow_every = slow_every
        self.util_hold = util_hold  # how long a per-process utilization sample stays valid
        self.driver_check = driver_check  # slow tier: an installed-but-not-loaded driver upgrade
        self.slurm = slurm  # job id -> name/account/...: a cache read, never a scontrol call here
        self._driver_checked_at: float | None = None
        self._driver_reported: str | None = None
        self.gpus: list[_Gpu] = []
        self.vanished: list[_Gpu] = []  # known GPUs NVML stopped listing on a re-init (not yet reported)
        self.pid_namespace_ok: bool | None = None
        self._ns_warned = False
        self._seq = 0

    # ------------------------------------------------------------------ lifecycle

    def open(self, require_gpu: bool = True) -> None:
        """Initialise NVML and find the GPUs. Raises NvmlUnavailable (for a clear exit at start-up, and so
        that a driver that fails again right after nvmlInit is just one more failed re-init try)."""
        self.gw.init()
        try:
            self._enumerate(require_gpu)
        except DriverError as exc:
            raise NvmlUnavailable(f"NVML not available: {exc}") from None

    def _enumerate(self, require_gpu: bool) -> None:
        """(Re)build the GPU list. GPUs are matched to what we knew by UUID, not by index: after a driver
        reload a GPU that fell off the bus is no longer listed and the ones after it move down an index.
        A known GPU that is no longer listed is kept in :attr:`vanished` until a ``gpu_lost`` event says so.
        """
        count = self.gw.device_count()
        if count == 0 and require_gpu:
            raise NvmlUnavailable("NVML not available: no NVIDIA GPU found (nvmlDeviceGetCount returned 0)")
        old = list(self.gpus)
        known = {g.uuid: g for g in old if not g.uuid.startswith("GPU-unknown-")}
        probes: list[tuple[_Gpu, str | None]] = []
        for i in range(count):
            probe = _Gpu(index=i, handle=None, uuid=f"GPU-unknown-{i}")
            self._open_handle(probe)
            uuid = None
            if probe.handle is not None:
                try:
                    uuid = self.gw.uuid(probe.handle)
                except GpuLostError as exc:
                    probe.lost = str(exc)
            probes.append((probe, uuid))
        matched: list[_Gpu | None] = [known.pop(u) if u and u in known else None for _, u in probes]
        for i, (_, uuid) in enumerate(probes):  # UUID unreadable now: the GPU that had this index before
            prev = next((o for o in old if o.index == i), None)
            if matched[i] is None and uuid is None and prev is not None and known.get(prev.uuid) is prev:
                matched[i] = known.pop(prev.uuid)
        self.gpus = []
        for (probe, uuid), g in zip(probes, matched, strict=True):
            if g is None:
                g = probe
                if uuid:
                    g.uuid = uuid
            else:
                g.index, g.handle, g.lost = probe.index, probe.handle, probe.lost or g.lost
            g.slow_at = None
            g.gpm, g.gpm_probed = None, False
            self.gpus.append(g)
        self.vanished.extend(known.values())
        if old and [g.uuid for g in old] != [g.uuid for g in self.gpus]:
            log.warning(
                "GPU inventory changed on NVML re-init: %s -> %s",
                ", ".join(f"{g.index}:{g.uuid}" for g in old),
                ", ".join(f"{g.index}:{g.uuid}" for g in self.gpus) or "no GPU",
            )
        for g in self.gpus:
            if g.handle is not None:
                try:
                    self._refresh_slow(g, self.clock())
                except GpuLostError as exc:
                    g.lost = str(exc)

    def reopen(self) -> None:
        """Shut NVML down and start again after a driver error (raises NvmlUnavailable while it fails)."""
        self._drop_gpm()
        self.gw.shutdown()
        self.open(require_gpu=False)

    def close(self) -> None:
        self._drop_gpm()
        self.gw.shutdown()
        if self.slurm is not None:
            self.slurm.close()

    def _drop_gpm(self) -> None:
        """Free the GPM buffers (a re-init probes GPM afresh with the new handles)."""
        for g in self.gpus:
            if g.gpm is not None:
                try:
                    self.gw.gpm_free(g.gpm)
                except (DriverError, GpuLostError):
                    pass
            g.gpm, g.gpm_probed = None, False

    def _open_handle(self, g: _Gpu) -> None:
        try:
            g.handle = self.gw.handle(g.index)
        except GpuLostError as exc:
            g.handle = None
            g.lost = str(exc)

    # ------------------------------------------------------------------ reading

    def _refresh_slow(self, g: _Gpu, now: float) -> None:
        gw, h = self.gw, g.handle
        g.slow_at = now
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
        g.mig_mode = gw.mig_mode(h)
        g.mig = []
        if g.mig_mode:
            for mh in gw.mig_handles(h):
                inst = gw.mig_instance(mh)
                if inst is not None:
                    g.mig.append((mh, inst))

    def _read_gpu(self, g: _Gpu, now: float) -> GpuSample:
        if g.handle is None:
            self._open_handle(g)
            if g.handle is None:
                raise GpuLostError(g.lost or "GPU handle unavailable")
        if g.slow_at is None or now - g.slow_at >= self.slow_every:
            self._refresh_slow(g, now)
        gw, h = self.gw, g.handle
        util_gpu, util_mem = gw.utilization(h)
        mem = gw.memory(h)
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
        )
        for mh, inst in g.mig:
            m = gw.memory(mh)
            s.mig_instances.append(
                MigInstance(
                    gi_id=inst.gi_id,
                    ci_id=inst.ci_id,
                    uuid=inst.uuid,
                    profile=inst.profile,
                    memory_total=inst.memory_total if m is None else m.total,
                    memory_used=None if m is None else m.used,
                )
            )
        s.sm_active = self._sm_active(g)
        s.processes = self._read_processes(g, now)
        return s

    def _sm_active(self, g: _Gpu) -> int | None:
        """GPM SM activity over the last interval, where the GPU has GPM (probed once per handle)."""
        if not g.gpm_probed:
            g.gpm_probed = True
            g.gpm = self.gw.gpm_open(g.handle)
        if g.gpm is None:
            return None
        value = self.gw.sm_activity(g.handle, g.gpm)
        if g.gpm.cur is None:
            g.gpm = None  # GPM sampling is not available after all: stop asking
        return value

    def _read_processes(self, g: _Gpu, now: float) -> list[ProcessSample]:
        raw = self.gw.processes(g.handle)
        if not raw:
            g.proc_util.clear()
            return []
        pu = self.gw.process_util(g.handle, g.proc_ts)
        if pu is not None:
            g.proc_ts = pu.last_ts
            for pid, (pid_sm, pid_mu) in pu.by_pid.items():
                g.proc_util[pid] = (pid_sm, pid_mu, now)
        live = {p.pid for p in raw}
        for pid in [p for p in g.proc_util if p not in live]:
            del g.proc_util[pid]
        out: list[ProcessSample] = []
        for p in raw:
            seen = g.proc_util.get(p.pid)
            sm: int | None
            mu: int | None
            if seen is not None and now - seen[2] <= self.util_hold:
                sm, mu = seen[0], seen[1]
            elif pu is not None:
                sm, mu = 0, 0  # a sample window that does not contain this pid: it ran no kernels
            else:
                sm = mu = None  # no samples at all: unknown
            out.append(
                ProcessSample(pid=p.pid, kind=p.kind, gpu_memory=p.used_memory, sm_util=sm, mem_util=mu)
            )
        return out

    def _attribute(self, gpus: list[GpuSample]) -> None:
        infos: dict[int, ProcInfo] = {}
        for s in gpus:
            for p in s.processes:
                info = infos.get(p.pid)
                if info is None:
                    info = infos[p.pid] = self.procs.lookup(p.pid)
                p.attributed = info.attributed
                if info.attributed:
                    p.user, p.uid, p.command = info.user, info.uid, info.command
                    p.start_time, p.state, p.ppid = info.start_time, info.state, info.ppid
                    p.container, p.pod, p.job = info.container, info.pod, info.job
                    p.pod_namespace, p.pod_name = info.pod_namespace, info.pod_name
                    p.container_name = info.container_name
                    if info.job is not None and self.slurm is not None:
                        j = self.slurm.get(info.job)
                        if j is not None:
                            p.job_name, p.job_user, p.job_account = j.name, j.user, j.account
                            p.job_partition, p.job_state = j.partition, j.state
        self.procs.forget(set(infos))
        if infos:
            all_missing = all(i.status == "missing" for i in infos.values())
            if not all_missing:
                self.pid_namespace_ok = True
            elif self.procs.hides_pids():
                self.pid_namespace_ok = None  # hidepid: other users' pids are invisible, can't tell
            else:
                self.pid_namespace_ok = False
            if self.pid_namespace_ok is False and not self._ns_warned:
                self._ns_warned = True
                log.warning(
                    "none of the GPU processes NVML lists (pids %s) exist in /proc: the agent seems to run "
                    "in a container without the host PID namespace (run it with --pid=host / hostPID: true); "
                    "processes are reported unattributed",
                    ", ".join(str(p) for p in sorted(infos)[:5]),
                )

    def sample(self) -> tuple[Snapshot, list[Event]]:
        """One snapshot of every GPU, and the gpu_lost events it revealed. Raises DriverError."""
        now = self.clock()
        ts = self.wall()
        samples: list[GpuSample] = []
        events: list[Event] = []
        for g in self.gpus:
            try:
                samples.append(self._read_gpu(g, now))
                if g.lost is not None:
                    log.warning("GPU %d (%s) answers again", g.index, g.uuid)
                g.lost, g.lost_reported = None, False
            except GpuLostError as exc:
                g.lost = str(exc)
                samples.append(
                    GpuSample(
                        index=g.index,
                        uuid=g.uuid,
                        name=g.name,
                        serial=g.serial,
                        pci_bus_id=g.pci_bus_id,
                        error=f"GPU lost: {g.lost}",
                    )
                )
                if not g.lost_reported:
                    g.lost_reported = True
                    log.error("GPU %d (%s) is lost: %s", g.index, g.uuid, g.lost)
                    events.append(
                        Event(
                            ts=ts,
                            kind="gpu_lost",
                            gpu_index=g.index,
                            uuid=g.uuid,
                            message=f"GPU {g.index} ({g.uuid}) stopped answering: {g.lost}",
                        )
                    )
        for g in self.vanished:
            log.error("GPU %d (%s) is no longer listed by NVML after re-initialisation", g.index, g.uuid)
            events.append(
                Event(
                    ts=ts,
                    kind="gpu_lost",
                    gpu_index=g.index,
                    uuid=g.uuid,
                    message=f"GPU {g.index} ({g.uuid}) is no longer listed by NVML after the driver came "
                    "back (fell off the bus?); the other GPUs may have moved to a lower index",
                )
            )
        self.vanished = []
        self._check_driver(now, ts, events)
        self._attribute(samples)
        self._seq += 1
        snapshot = Snapshot(ts=ts, seq=self._seq, gpus=samples)
        if self.slurm is not None:  # a cache read: the jobs holding GPUs here, used or not
            jobs = (p.job for g in samples for p in g.processes if p.job)
            snapshot.allocations = self.slurm.allocations(jobs)
        return snapshot, events

    def _check_driver(self, now: float, ts: float, events: list[Event]) -> None:
        """One driver_error event per distinct pending mismatch (checked every ``slow_every`` s)."""
        if self.driver_check is None:
            return
        if self._driver_checked_at is not None and now - self._driver_checked_at < self.slow_every:
            return
        self._driver_checked_at = now
        problem = self.driver_check()
        if problem is not None and problem != self._driver_reported:
            log.error("%s", problem)
            events.append(Event(ts=ts, kind="driver_error", message=problem))
        self._driver_reported = problem

    # ------------------------------------------------------------------ hello

    def hello(self, hostname: str, agent_version: str, ts: float | None = None) -> Hello:
        """The hello frame; ``ts`` (default now) lets the caller stamp it before the first snapshot."""
        try:
            info = self.gw.system_info()
        except DriverError:
            info = nvml.SystemInfo(None, None, None)
        return Hello(
            agent_version=agent_version,
            hostname=hostname,
            ts=self.wall() if ts is None else ts,
            driver_version=info.driver_version,
            nvml_version=info.nvml_version,
            cuda_version=info.cuda_version,
            backend=self.gw.backend,
            pid_namespace_ok=self.pid_namespace_ok,
            gpus=[
                GpuInfo(
                    index=g.index,
                    uuid=g.uuid,
                    name=g.name,
                    serial=g.serial,
                    pci_bus_id=g.pci_bus_id,
                    memory_total=self._total(g),
                    power_limit=g.power_limit,
                    temp_slowdown=g.temp_slowdown,
                    temp_shutdown=g.temp_shutdown,
                    mig_mode=g.mig_mode,
                )
                for g in self.gpus
            ],
        )

    def _total(self, g: _Gpu) -> int | None:
        if g.handle is None or g.lost:
            return None
        try:
            m = self.gw.memory(g.handle)
        except (GpuLostError, DriverError):
            return None
        return None if m is None else m.total

    def handle_map(self) -> dict[int, tuple[int, str]]:
        """handle key -> (index, uuid), for matching event-set events to GPUs."""
        return {nvml.handle_key(g.handle): (g.index, g.uuid) for g in self.gpus if g.handle is not None}


def shrink_to_fit(snapshot: Snapshot, limit: int = MAX_LINE_BYTES) -> Snapshot:
    """Keep a huge snapshot under the collector's line bound (which would otherwise close the stream).

    First shorten commands, then keep only the processes holding the most memory on each GPU.
    """
    if len(encode(snapshot)) <= limit:
        return snapshot
    for g in snapshot.gpus:
        for p in g.processes:
            if p.command and len(p.command) > 200:
                p.command = p.command[:200] + "..."
    keep = 256
    while len(encode(snapshot)) > limit and keep >= 1:
        for g in snapshot.gpus:
            g.processes = sorted(g.processes, key=lambda p: -(p.gpu_memory or 0))[:keep]
        keep //= 2
    log.warning("snapshot %d exceeded %d bytes: commands shortened, processes cut", snapshot.seq, limit)
    return snapshot
