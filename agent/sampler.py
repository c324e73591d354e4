"""Turns gateway readings into wire frames: one :class:`Snapshot` per call, plus the events it implies.

Each GPU is read by :mod:`gpufleet.agent.gpu_reader` (tiers, MIG, processes, health), on the worker of a
:class:`~gpufleet.agent.watchdog.Reads`, so a read that never returns marks that GPU "hung" and the others
keep being sampled. Handles stay open.

A GPU that cannot be read becomes a :class:`GpuSample` with ``error`` and ``fault`` set, and the rest of the
snapshot still goes out:
- "lost": NVML says so (GPU_IS_LOST, GPU_NOT_FOUND, RESET_REQUIRED), or every reading failed for
  ``ALL_FAILED_SAMPLES`` samples in a row. One ``gpu_lost`` event per loss. Its handle is dropped and NVML is
  re-initialised now and then (:meth:`Sampler.reinit_due`) so a GPU that comes back after a reset is seen.
- "unreadable": the agent may not open it (NO_PERMISSION). No event: the GPU is fine.
- "hung": an NVML call on it has not returned for ``hang_after`` seconds. One ``gpu_hung`` event.
A single field that fails is null and named in ``read_errors``, never a lost GPU. A driver failure
propagates as :class:`DriverError`; the caller re-initialises with :meth:`Sampler.reopen`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from gpufleet.agent import nvml
from gpufleet.agent.errors import DriverError, GpuLostError, GpuUnreadable, NvmlUnavailable
from gpufleet.agent.gpu_reader import GpuState, drop_gpm, open_handle, read_gpu, refresh_slow
from gpufleet.agent.nvml.codes import ALL_FAILED_SAMPLES
from gpufleet.agent.procinfo import ProcInfo, ProcSource
from gpufleet.agent.slurm import SlurmResolver
from gpufleet.agent.watchdog import Reads, Stuck
from gpufleet.agent.wire import (
    MAX_LINE_BYTES,
    Event,
    GpuInfo,
    GpuSample,
    Hello,
    Snapshot,
    encode,
)

log = logging.getLogger(__name__)

#: Seconds a read may run before its GPU counts as hung: well above a slow first NVML call without the
#: persistence daemon (about a second), well below the minutes a D-state read lasts.
HANG_AFTER = 10.0
#: While a GPU is lost, NVML is re-initialised after this long, then twice as long each time, up to
#: REINIT_MAX: a GPU that comes back after ``nvidia-smi -r`` gets a fresh handle.
REINIT_FIRST = 60.0
REINIT_MAX = 600.0


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
        hang_after: float = HANG_AFTER,
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
        self.reads = Reads(hang_after)  # real time: a hang is a wall-clock matter, whatever ``clock`` is
        self._driver_checked_at: float | None = None
        self._driver_reported: str | None = None
        self.gpus: list[GpuState] = []
        self.vanished: list[GpuState] = []  # known GPUs NVML stopped listing on a re-init (not yet reported)
        self.pid_namespace_ok: bool | None = None
        self._ns_warned = False
        self._seq = 0
        self._reinit_after = REINIT_FIRST
        self._reinit_at: float | None = None  # monotonic time the next re-init is due (a GPU is lost)

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
        probes: list[tuple[GpuState, str | None]] = []
        for i in range(count):
            probe = GpuState(index=i, handle=None, uuid=f"GPU-unknown-{i}")
            open_handle(self.gw, probe)
            uuid = None
            if probe.handle is not None:
                try:
                    uuid = self.gw.uuid(probe.handle)
                except GpuLostError as exc:
                    probe.fault, probe.error = "lost", str(exc)
            probes.append((probe, uuid))
        matched: list[GpuState | None] = [known.pop(u) if u and u in known else None for _, u in probes]
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
                g.index, g.handle = probe.index, probe.handle
                if probe.handle is not None and probe.fault is None:
                    g.all_failed = 0  # answers again: the next sample decides whether the fault is over
                else:
                    g.fault, g.error = probe.fault or g.fault, probe.error or g.error
            g.slow_at = g.medium_at = None
            g.gpm, g.gpm_probed, g.gpm_mig = None, False, {}
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
                    refresh_slow(self.gw, g, self.clock())
                except GpuLostError as exc:
                    g.fault, g.error, g.handle = "lost", str(exc), None

    def reopen(self) -> None:
        """Shut NVML down and start again after a driver error (raises NvmlUnavailable while it fails)."""
        self._drop_gpm()
        self.gw.shutdown()
        self.open(require_gpu=False)

    def close(self) -> None:
        self._drop_gpm()
        self.reads.close()
        self.gw.shutdown()
        if self.slurm is not None:
            self.slurm.close()

    def _drop_gpm(self) -> None:
        for g in self.gpus:
            drop_gpm(self.gw, g)

    def reinit_due(self) -> bool:
        """Whether NVML should be re-initialised now to look for lost GPUs that came back (with backoff;
        never while a read hangs: nvmlShutdown would wait for it)."""
        if self._reinit_at is None or self.clock() < self._reinit_at or self.reads.stuck():
            return False
        self._reinit_after = min(REINIT_MAX, self._reinit_after * 2)
        self._reinit_at = self.clock() + self._reinit_after
        return True

    # ------------------------------------------------------------------ reading

    def _faulty(self, g: GpuState, fault: str, error: str, ts: float, events: list[Event]) -> GpuSample:
        """The error entry of a GPU that cannot be read, and its event the first time (lost, hung)."""
        if g.fault != fault:
            g.fault_reported = False
        g.fault, g.error = fault, error
        if fault == "lost":
            g.handle = None  # a dead handle is never read again: the next sample opens a fresh one
            if self._reinit_at is None:
                self._reinit_at = self.clock() + self._reinit_after
        if fault != "unreadable" and not g.fault_reported:
            g.fault_reported = True
            kind = "gpu_lost" if fault == "lost" else "gpu_hung"
            verb = "stopped answering" if fault == "lost" else "has an NVML read that does not return"
            log.error("GPU %d (%s) %s: %s", g.index, g.uuid, verb, error)
            events.append(Event(ts=ts, kind=kind, gpu_index=g.index, uuid=g.uuid,
                                message=f"GPU {g.index} ({g.uuid}) {verb}: {error}"))
        prefix = {"lost": "GPU lost", "hung": "GPU hung", "unreadable": "GPU unreadable"}[fault]
        return GpuSample(index=g.index, uuid=g.uuid, name=g.name, serial=g.serial, pci_bus_id=g.pci_bus_id,
                         error=f"{prefix}: {error}", fault=fault)

    def _outcome(self, g: GpuState, result: Any, stuck: Stuck | None, ts: float,
                 events: list[Event]) -> GpuSample:
        if stuck is not None:
            waited = time.monotonic() - stuck.since
            return self._faulty(g, "hung", f"an NVML read has not returned for {waited:.1f} s", ts, events)
        if isinstance(result, GpuLostError):
            return self._faulty(g, "lost", str(result), ts, events)
        if isinstance(result, GpuUnreadable):
            if g.fault in ("lost", "unreadable"):
                return self._faulty(g, g.fault, g.error or str(result), ts, events)
            g.all_failed += 1
            result = GpuSample(index=g.index, uuid=g.uuid, name=g.name, serial=g.serial,
                               pci_bus_id=g.pci_bus_id, read_errors={"handle": str(result)})
        if isinstance(result, BaseException):
            raise result
        if g.all_failed >= ALL_FAILED_SAMPLES:
            why = ", ".join(sorted(set((result.read_errors or {}).values()))) or "no answer"
            why = f"every reading failed for {g.all_failed} samples ({why})"
            return self._faulty(g, "lost", why, ts, events)
        if g.fault is not None:
            log.warning("GPU %d (%s) answers again", g.index, g.uuid)
        g.fault, g.error, g.fault_reported = None, None, False
        sample: GpuSample = result
        return sample

    def sample(self) -> tuple[Snapshot, list[Event]]:
        """One snapshot of every GPU, and the events it revealed. Raises DriverError."""
        now = self.clock()
        ts = self.wall()
        events: list[Event] = []

        def job(g: GpuState) -> tuple[Hashable, Callable[[], GpuSample]]:
            return g.index, lambda: read_gpu(self.gw, g, now, self.slow_every, self.util_hold)

        stuck = self.reads.stuck()
        results, hung = self.reads.run([job(g) for g in self.gpus if g.index not in stuck])
        stuck.update(hung)
        samples = [self._outcome(g, results.get(g.index), stuck.get(g.index), ts, events) for g in self.gpus]
        if not any(g.fault == "lost" for g in self.gpus):
            self._reinit_at, self._reinit_after = None, REINIT_FIRST
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
                    memory_total=g.memory_total,
                    power_limit=g.power_limit,
                    temp_slowdown=g.temp_slowdown,
                    temp_shutdown=g.temp_shutdown,
                    mig_mode=g.mig_mode,
                )
                for g in self.gpus
            ],
        )

    def xid_seen(self, index: int | None) -> None:
        """An Xid on GPU ``index`` (None: which is unknown): its recovery action may have changed (Xid 154
        says so), so its middle tier is read at the next sample (gpu_reader.py). Called from the Xid
        watcher's thread: it only clears a time."""
        for g in self.gpus:
            if index is None or g.index == index:
                g.medium_at = None

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
