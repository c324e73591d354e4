"""Prometheus exposition of the live fleet and the collector's own health.

A custom :class:`prometheus_client` collector builds every family fresh on each scrape from the live view
(no client-side metric objects to keep in sync, so a host that leaves leaves no stale series), and a tiny
asyncio HTTP server serves it. Only a cheap copy is taken on the event loop (the live view is mutated
there, so a thread could see a half-updated host): each HostState shallow-copied (snapshots are replaced
whole on every frame, never edited) plus the rule flags, alert counts and stats. Building the families
and formatting the text run in a thread, so a scrape of 1,000 hosts x 8 GPUs does not stall ingest.

Choices that matter to dashboards:
- GPU series exist only for hosts whose status is ``up``: a down host's last snapshot is history, not a
  reading, and showing it as current would draw flat lines. ``gpufleet_host_up`` says which.
- Absent readings (NVML NOT_SUPPORTED / NO_PERMISSION) give no sample, never a fake 0.
- Per-process series would explode cardinality (a pid per job); users are aggregated per GPU instead.
- ECC volatile counts only grow until the driver reloads, so they are counters (``rate()`` handles the
  reset), not gauges.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpufleet.collector.faces.aioserver import HttpServer, Request, respond
from gpufleet.collector.faces.metrics import dcgm as metrics_dcgm
from gpufleet.collector.faces.metrics.exposition import LabelStrings, Scrape, Spec
from gpufleet.collector.faces.source import Running
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import allocated_indexes, uses
from gpufleet.collector.model.classify import gpu_state
from gpufleet.collector.model.summary import fleet_state
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.model.views import GPU_STATES, HOST_STATUSES
from gpufleet.collector.rules.catalog import flag_name
from gpufleet.collector.service.gcpause import no_cycle_collection
from gpufleet.collector.transport.wirestate import budget_counts, wire_counts
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

UNATTRIBUTED_USER = "(unattributed)"  # label for processes /proc could not attribute


# ------------------------------------------------------------------------------------------ families

_HOST = ("host",)
_GPU = ("host", "gpu", "uuid", "name")
_USER = ("host", "gpu", "user")
_POD = ("host", "gpu", "namespace", "pod", "container")
_JOB = ("host", "job", "user", "account")


_SPECS: tuple[Spec, ...] = (
    # hosts
    Spec("gpufleet_host_up", "gauge", "1 while the collector has a live agent stream from the host.", _HOST),
    Spec("gpufleet_host_maintenance", "gauge",
         "1 while the host is in maintenance (gpufleet maintenance start): no agent session, alerts muted.",
         _HOST),
    Spec("gpufleet_host_last_seen_timestamp_seconds", "gauge", "Wall time the last frame arrived.", _HOST),
    Spec("gpufleet_host_status_since_timestamp_seconds", "gauge", "When the status last changed.", _HOST),
    Spec("gpufleet_host_snapshot_timestamp_seconds", "gauge", "Agent time of the latest snapshot.", _HOST),
    Spec("gpufleet_host_info", "gauge", "Agent and driver versions reported in hello (always 1).",
         ("host", "agent_version", "driver_version", "nvml_version", "cuda_version", "backend")),
    Spec("gpufleet_host_tag", "gauge", "One series per configured host tag (always 1), for joins.",
         ("host", "tag")),
    Spec("gpufleet_host_gpus", "gauge", "GPUs in the host's latest snapshot.", _HOST),
    Spec("gpufleet_host_lag_seconds", "gauge", "Receive time minus frame timestamp, last frame.", _HOST),
    Spec("gpufleet_host_frames_total", "counter", "Valid frames received from the host.", _HOST),
    Spec("gpufleet_host_bad_frames_total", "counter", "Invalid frames received from the host.", _HOST),
    Spec("gpufleet_host_clock_skew_seconds", "gauge",
         "Seconds the collector adds to the host's timestamps (its clock is off by over max_clock_skew).",
         _HOST),
    Spec("gpufleet_host_dropped_frames_total", "counter",
         "Frames dropped over the host's budget: what=frame (bytes/s), what=event (events/s).",
         ("host", "what")),
    Spec("gpufleet_host_dropped_bytes_total", "counter", "Bytes of frames dropped over the bytes/s budget.",
         _HOST),
    Spec("gpufleet_host_wire_ignored_total", "counter",
         "What the collector ignored: frame (a newer agent's frame type), field (a newer agent's field), "
         "value (a reading out of its plausible range, nulled).",
         ("host", "what")),
    Spec("gpufleet_host_connects_total", "counter", "Successful connections to the host.", _HOST),
    Spec("gpufleet_host_reconnects_total", "counter", "Connection attempts after the first.", _HOST),
    # GPUs (hosts that are up)
    Spec("gpufleet_gpu_info", "gauge", "Static GPU facts (always 1).",
         _GPU + ("pci_bus_id", "serial")),
    Spec("gpufleet_gpu_utilization_percent", "gauge", "GPU (kernel) utilization.", _GPU),
    Spec("gpufleet_gpu_memory_utilization_percent", "gauge", "Memory controller utilization.", _GPU),
    Spec("gpufleet_gpu_sm_active_percent", "gauge",
         "Share of SMs busy (NVML GPM SM utilization; Hopper and later only).", _GPU),
    Spec("gpufleet_gpu_memory_used_bytes", "gauge", "GPU memory in use.", _GPU),
    Spec("gpufleet_gpu_memory_total_bytes", "gauge", "GPU memory installed.", _GPU),
    Spec("gpufleet_gpu_memory_reserved_bytes", "gauge", "GPU memory reserved by the driver.", _GPU),
    Spec("gpufleet_gpu_temperature_celsius", "gauge", "GPU core temperature.", _GPU),
    Spec("gpufleet_gpu_temperature_slowdown_celsius", "gauge", "GPU slowdown temperature.", _GPU),
    Spec("gpufleet_gpu_temperature_shutdown_celsius", "gauge", "GPU shutdown temperature.", _GPU),
    Spec("gpufleet_gpu_power_watts", "gauge", "Power draw.", _GPU),
    Spec("gpufleet_gpu_power_limit_watts", "gauge", "Enforced power limit.", _GPU),
    Spec("gpufleet_gpu_sm_clock_hertz", "gauge", "SM clock.", _GPU),
    Spec("gpufleet_gpu_memory_clock_hertz", "gauge", "Memory clock.", _GPU),
    Spec("gpufleet_gpu_fan_speed_percent", "gauge", "Fan speed.", _GPU),
    Spec("gpufleet_gpu_throttled", "gauge", "1 for each active clock throttle reason.", _GPU + ("reason",)),
    Spec("gpufleet_gpu_ecc_errors_total", "counter", "Volatile ECC errors since the driver loaded.",
         _GPU + ("type",)),
    Spec("gpufleet_gpu_mig_mode", "gauge", "1 when MIG mode is enabled.", _GPU),
    Spec("gpufleet_gpu_mig_memory_used_bytes", "gauge", "Memory in use in a MIG instance.",
         ("host", "gpu", "gi", "ci", "profile")),
    Spec("gpufleet_gpu_mig_memory_total_bytes", "gauge", "Memory of a MIG instance.",
         ("host", "gpu", "gi", "ci", "profile")),
    Spec("gpufleet_gpu_processes", "gauge", "Processes holding the GPU.", _GPU),
    Spec("gpufleet_gpu_processes_unattributed", "gauge",
         "Processes holding the GPU that /proc could not attribute (other PID namespace, hidepid).", _GPU),
    Spec("gpufleet_gpu_wasted", "gauge", "1 while the 'wasted' rule fires for the GPU.", _GPU),
    Spec("gpufleet_gpu_flag", "gauge", "1 for each rule firing for the GPU.", _GPU + ("flag",)),
    Spec("gpufleet_gpu_lost", "gauge", "1 when the GPU could not be read or the gpu_lost rule fires.", _GPU),
    Spec("gpufleet_gpus", "gauge", "GPUs by state, each GPU in one (the status line's counts): busy, wasted, "
         "idle, lost, hung, unreadable, unknown (host not up), maintenance.", ("state",)),
    # users (aggregated; never per pid)
    Spec("gpufleet_user_gpu_memory_bytes", "gauge", "GPU memory held by a user's processes on one GPU.",
         _USER),
    Spec("gpufleet_user_gpu_processes", "gauge", "A user's processes on one GPU.", _USER),
    Spec("gpufleet_user_gpus", "gauge", "GPUs across the fleet where the user holds a process.", ("user",)),
    # Kubernetes pods (names the agent resolved on the node; the labels dcgm-exporter's pod mapping uses)
    Spec("gpufleet_pod_gpu_memory_bytes", "gauge", "GPU memory held by a pod's processes on one GPU.", _POD),
    Spec("gpufleet_pod_gpu_processes", "gauge", "A pod's processes on one GPU.", _POD),
    # Slurm jobs holding GPUs (scontrol GRES IDX), used or not (collector/model/allocation.py)
    Spec("gpufleet_slurm_gpus_allocated", "gauge", "GPUs a running Slurm job holds on the host.", _JOB),
    Spec("gpufleet_slurm_gpus_unused", "gauge",
         "GPUs a running Slurm job holds on the host that none of its processes runs on.", _JOB),
    # alerts
    Spec("gpufleet_alerts", "gauge", "Active alerts by rule, severity and state (pending or firing).",
         ("rule", "severity", "state")),
    # collector health
    Spec("gpufleet_collector_hosts", "gauge", "Configured hosts by connection status.", ("status",)),
    Spec("gpufleet_collector_lag_seconds", "gauge", "Largest frame lag over the hosts that are up."),
    Spec("gpufleet_collector_frames_total", "counter", "Valid frames received from all hosts."),
    Spec("gpufleet_collector_bad_frames_total", "counter", "Invalid frames received from all hosts."),
    Spec("gpufleet_collector_reconnects_total", "counter", "Reconnection attempts to all hosts."),
    Spec("gpufleet_collector_store_queue_depth", "gauge", "Items waiting for the SQLite writer."),
    Spec("gpufleet_collector_store_queue_bytes", "gauge",
         "Estimated memory held by the SQLite writer's queue (bounded: the oldest snapshots are dropped)."),
    Spec("gpufleet_collector_store_dropped_total", "counter", "Items dropped: store queue full."),
    Spec("gpufleet_collector_store_refused_total", "counter",
         "Frames the store refused (logged): a time outside its window or an impossible value."),
    Spec("gpufleet_collector_store_shed_total", "counter",
         "Snapshots not stored because writes fell behind (shed evenly: one in k per host kept)."),
    Spec("gpufleet_collector_store_keep_one_in", "gauge",
         "1 while every snapshot is stored; k while the store keeps one in k per host."),
    Spec("gpufleet_collector_store_healthy", "gauge", "1 while the store accepts writes."),
    Spec("gpufleet_collector_notify_queue_depth", "gauge", "Notifications waiting to be sent."),
    Spec("gpufleet_collector_notifications_sent_total", "counter", "Notifications delivered."),
    Spec("gpufleet_collector_notifications_failed_total", "counter", "Notifications failed after retries."),
    Spec("gpufleet_collector_uptime_seconds", "gauge", "Seconds since the collector started."),
    Spec("gpufleet_collector_gc_collections_total", "counter",
         "Python cycle collections in the collector process (its thresholds: collector/service/gcpause.py)."),
    Spec("gpufleet_collector_gc_seconds_total", "counter",
         "Seconds the collector process spent in Python's cycle collector."),
    Spec("gpufleet_collector_info", "gauge",
         "1, labelled with this collector's name and shard (I/N; empty: the whole fleet), so several "
         "collectors scraped by one Prometheus can be told apart.", ("collector", "shard")),
    Spec("gpufleet_collector_metrics_errors_total", "counter",
         "Scrapes where a section of the exposition failed (the rest was still served).", ("section",)),
)

#: Every sample name the exposition can emit for the specs above (stats keys not listed are added as
#: ``gpufleet_collector_<key>``, see :func:`stat_metric_name`).
METRIC_NAMES: frozenset[str] = frozenset(s.name for s in _SPECS)

#: stats() keys already exposed another way (live view); not repeated.
_STATS_SKIPPED = frozenset({"hosts_total", "hosts_up", "lag_max_seconds"})
_STAT_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")


def stat_metric_name(key: str) -> str | None:
    """``frames_total`` -> ``gpufleet_collector_frames_total``; None for keys that are not metric-safe."""
    if not _STAT_KEY.match(key) or key in _STATS_SKIPPED:
        return None
    return f"gpufleet_collector_{key}"


def _cuda(version: int | None) -> str:
    """NVML's 12040 -> "12.4"."""
    if version is None:
        return ""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _mhz(value: int | None) -> float | None:
    return None if value is None else value * 1e6


@dataclass(slots=True)
class ScrapeView:
    """What one scrape reads, copied on the event loop so the families can be built in a thread.

    A source call that raised is kept as the error of its section (raised again while building, so the
    section is dropped and counted exactly as if it had failed there).
    """

    hosts: list[HostState]
    flags: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    alert_counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)
    identity: tuple[str, str] = ("", "")
    errors: dict[str, BaseException] = field(default_factory=dict)

    def check(self, section: str) -> None:
        exc = self.errors.get(section)
        if exc is not None:
            raise exc


class FleetCollector:
    """prometheus_client collector over a running collector; a failing section never blanks the rest."""

    def __init__(self, source: Running, *, dcgm_names: bool = False) -> None:
        self.source = source
        self.dcgm_names = dcgm_names  # also dcgm-exporter's series (collector/faces/metrics/dcgm.py)
        self.thresholds = thresholds_of(source.config.rules)  # busy or idle, as the status view classifies
        self.section_errors: dict[str, int] = {}
        self._label_strings: LabelStrings = {}  # the last scrape's, reused by the next (exposition.Scrape)

    def describe(self) -> Iterable[Metric]:
        """Every spec'd family, empty: lets the registry know our names without a scrape."""
        fams = [s.family() for s in _SPECS]
        if self.dcgm_names:
            fams += [s.family() for s in metrics_dcgm.SPECS]
        return fams

    def collect(self) -> Iterable[Metric]:
        return self.build(self.freeze(), samples=True).metrics()

    def freeze(self) -> ScrapeView:
        """Copy what a scrape needs from the source. Cheap; call it on the loop that mutates the source."""
        hosts = []
        for h in list(self.source.live.hosts.values()):
            c = copy.copy(h)
            c.tags = list(h.tags)
            hosts.append(c)
        view = ScrapeView(hosts)
        try:
            view.flags = self.source.firing().gpus()
        except Exception as exc:  # noqa: BLE001 - reported when the gpus section is built
            view.errors["gpus"] = exc
        try:
            view.alert_counts = dict(self.source.alert_counts())
        except Exception as exc:  # noqa: BLE001
            view.errors["alerts"] = exc
        try:
            view.stats = dict(self.source.stats())
            view.identity = self.source.identity()
        except Exception as exc:  # noqa: BLE001
            view.errors["collector"] = exc
        return view

    def build(self, view: ScrapeView, *, samples: bool = False) -> Scrape:
        """The samples of one scrape from a :meth:`freeze` copy; touches nothing else (thread-safe).
        ``samples``: keep the values too, for :meth:`Scrape.metrics` (a registry's collect)."""
        batch = Scrape((*_SPECS, *metrics_dcgm.SPECS) if self.dcgm_names else _SPECS,
                       previous=self._label_strings, samples=samples)
        hosts = view.hosts
        self._section(batch, "hosts", lambda: self._hosts(batch, hosts))
        self._section(batch, "gpus", lambda: self._gpus(batch, view))
        self._section(batch, "alerts", lambda: self._alerts(batch, view))
        self._section(batch, "collector", lambda: self._collector(batch, view))
        if self.dcgm_names:
            self._section(batch, "dcgm", lambda: metrics_dcgm.add_samples(batch, hosts))
        for section, count in sorted(self.section_errors.items()):
            batch.add("gpufleet_collector_metrics_errors_total", (section,), count)
        self._label_strings = batch.label_strings  # (a concurrent scrape's may win: either serves)
        return batch

    def _section(self, batch: Scrape, name: str, build: Callable[[], None]) -> None:
        """Run one section; on failure drop what it half-added, so a scrape never shows a partial GPU."""
        marks = batch.mark()
        try:
            build()
        except Exception:  # noqa: BLE001 - one broken source must not take the whole scrape down
            self.section_errors[name] = self.section_errors.get(name, 0) + 1
            log.exception("metrics: building the %s section failed", name)
            batch.rollback(marks)

    # ------------------------------------------------------------------------------------ sections

    def _hosts(self, b: Scrape, hosts: list[HostState]) -> None:
        for h in hosts:
            lab = (h.name,)
            b.add("gpufleet_host_up", lab, 1 if h.status == "up" else 0)
            b.add("gpufleet_host_maintenance", lab, 1 if h.status == "maintenance" else 0)
            b.add("gpufleet_host_last_seen_timestamp_seconds", lab, h.last_seen)
            b.add("gpufleet_host_status_since_timestamp_seconds", lab, h.since)
            if h.agent_version is not None:
                b.add("gpufleet_host_info", (h.name, h.agent_version, h.driver_version or "",
                                             h.nvml_version or "", _cuda(h.cuda_version), h.backend or ""), 1)
            for tag in dict.fromkeys(h.tags):
                b.add("gpufleet_host_tag", (h.name, tag), 1)
            b.add("gpufleet_host_frames_total", lab, h.frames)
            b.add("gpufleet_host_bad_frames_total", lab, h.bad_frames)
            dropped = budget_counts(h)
            b.add("gpufleet_host_dropped_frames_total", (h.name, "frame"), dropped["frames"])
            b.add("gpufleet_host_dropped_frames_total", (h.name, "event"), dropped["events"])
            b.add("gpufleet_host_dropped_bytes_total", lab, dropped["bytes"])
            for what, count in wire_counts(h).items():
                b.add("gpufleet_host_wire_ignored_total", (h.name, what), count)
            b.add("gpufleet_host_connects_total", lab, h.connects)
            b.add("gpufleet_host_reconnects_total", lab, h.reconnects)
            if h.status == "up":
                b.add("gpufleet_host_lag_seconds", lab, h.lag)
                if h.clock_skew is not None:
                    b.add("gpufleet_host_clock_skew_seconds", lab, h.clock_skew)
                if h.snapshot is not None:
                    b.add("gpufleet_host_snapshot_timestamp_seconds", lab, h.snapshot.ts)
                    b.add("gpufleet_host_gpus", lab, len(h.snapshot.gpus))

    def _gpus(self, b: Scrape, view: ScrapeView) -> None:
        view.check("gpus")
        user_gpus: dict[str, set[tuple[str, int]]] = {}
        no_flags: set[str] = set()
        for h in view.hosts:
            snap = h.snapshot
            if h.status != "up" or snap is None:
                continue
            for g in snap.gpus:
                self._gpu(b, h.name, g, view.flags.get((h.name, g.index), no_flags))
                for user in self._users(b, h.name, g):
                    user_gpus.setdefault(user, set()).add((h.name, g.index))
                self._pods(b, h.name, g)
            for use in uses(snap):
                a = use.allocation
                jlab = (h.name, a.job, a.user or "", a.account or "")
                jls = b.label_string(_JOB, jlab)
                b.put("gpufleet_slurm_gpus_allocated", _JOB, jlab, jls, len(use.allocated))
                b.put("gpufleet_slurm_gpus_unused", _JOB, jlab, jls, len(use.unused))
        for user, gpus in sorted(user_gpus.items()):
            b.add("gpufleet_user_gpus", (user,), len(gpus))
        self._states(b, view)

    def _states(self, b: Scrape, view: ScrapeView) -> None:
        """The GPUs by state, decided as every view decides them (collector/model/summary.py fleet_state)."""
        states = dict.fromkeys(GPU_STATES, 0)
        for h in view.hosts:
            if h.snapshot is None:
                continue
            held = allocated_indexes(h.snapshot)  # a running Slurm job's GPUs: unused, not idle
            for g in h.snapshot.gpus:
                flags = {flag_name(rule) for rule in view.flags.get((h.name, g.index), ())}
                states[fleet_state(gpu_state(g, self.thresholds, g.index in held), flags, h.status)] += 1
        for state, n in states.items():
            b.add("gpufleet_gpus", (state,), n)

    def _gpu(self, b: Scrape, host: str, g: sample.GpuSample, flags: set[str]) -> None:
        lab = (host, str(g.index), g.uuid, g.name or "")
        b.add("gpufleet_gpu_info", lab + (g.pci_bus_id or "", g.serial or ""), 1)
        ls = b.label_string(_GPU, lab)  # the GPU's labels, escaped once for its ~25 series

        b.put("gpufleet_gpu_utilization_percent", _GPU, lab, ls, g.util_gpu)
        b.put("gpufleet_gpu_memory_utilization_percent", _GPU, lab, ls, g.util_mem)
        b.put("gpufleet_gpu_sm_active_percent", _GPU, lab, ls, g.sm_active)
        b.put("gpufleet_gpu_memory_used_bytes", _GPU, lab, ls, g.memory_used)
        b.put("gpufleet_gpu_memory_total_bytes", _GPU, lab, ls, g.memory_total)
        b.put("gpufleet_gpu_memory_reserved_bytes", _GPU, lab, ls, g.memory_reserved)
        b.put("gpufleet_gpu_temperature_celsius", _GPU, lab, ls, g.temperature)
        b.put("gpufleet_gpu_temperature_slowdown_celsius", _GPU, lab, ls, g.temp_slowdown)
        b.put("gpufleet_gpu_temperature_shutdown_celsius", _GPU, lab, ls, g.temp_shutdown)
        b.put("gpufleet_gpu_power_watts", _GPU, lab, ls, g.power_draw)
        b.put("gpufleet_gpu_power_limit_watts", _GPU, lab, ls, g.power_limit)
        b.put("gpufleet_gpu_sm_clock_hertz", _GPU, lab, ls, _mhz(g.clock_sm))
        b.put("gpufleet_gpu_memory_clock_hertz", _GPU, lab, ls, _mhz(g.clock_mem))
        b.put("gpufleet_gpu_fan_speed_percent", _GPU, lab, ls, g.fan_speed)
        for reason in dict.fromkeys(g.throttle_reasons or ()):
            b.add("gpufleet_gpu_throttled", lab + (reason,), 1)
        b.add("gpufleet_gpu_ecc_errors_total", lab + ("corrected",), g.ecc_corrected)
        b.add("gpufleet_gpu_ecc_errors_total", lab + ("uncorrected",), g.ecc_uncorrected)
        if g.mig_mode is not None:
            b.put("gpufleet_gpu_mig_mode", _GPU, lab, ls, 1 if g.mig_mode else 0)
        for m in g.mig_instances:
            ci = "" if m.ci_id is None else str(m.ci_id)
            mlab = (host, str(g.index), str(m.gi_id), ci, m.profile or "")
            b.add("gpufleet_gpu_mig_memory_used_bytes", mlab, m.memory_used)
            b.add("gpufleet_gpu_mig_memory_total_bytes", mlab, m.memory_total)
        b.put("gpufleet_gpu_processes", _GPU, lab, ls, len(g.processes))
        unattributed = sum(1 for p in g.processes if not p.attributed)
        b.put("gpufleet_gpu_processes_unattributed", _GPU, lab, ls, unattributed)
        b.put("gpufleet_gpu_wasted", _GPU, lab, ls, 1 if "wasted" in flags else 0)
        for flag in sorted(flags):
            b.add("gpufleet_gpu_flag", lab + (flag,), 1)
        b.put("gpufleet_gpu_lost", _GPU, lab, ls, 1 if g.error is not None or "gpu_lost" in flags else 0)

    def _users(self, b: Scrape, host: str, g: sample.GpuSample) -> list[str]:
        count, memory = _holdings(g, lambda p: (p.user or UNATTRIBUTED_USER,))
        for key in sorted(count):
            ulab = (host, str(g.index), *key)
            uls = b.label_string(_USER, ulab)
            b.put("gpufleet_user_gpu_processes", _USER, ulab, uls, count[key])
            b.put("gpufleet_user_gpu_memory_bytes", _USER, ulab, uls, memory[key])
        return [key[0] for key in count]

    @staticmethod
    def _pods(b: Scrape, host: str, g: sample.GpuSample) -> None:
        count, memory = _holdings(g, lambda p: (p.pod_namespace or "", p.pod_name, p.container_name or "")
                                  if p.pod_name else None)
        for key in sorted(count):
            plab = (host, str(g.index), *key)
            pls = b.label_string(_POD, plab)
            b.put("gpufleet_pod_gpu_processes", _POD, plab, pls, count[key])
            b.put("gpufleet_pod_gpu_memory_bytes", _POD, plab, pls, memory[key])

    def _alerts(self, b: Scrape, view: ScrapeView) -> None:
        view.check("alerts")
        for (rule, severity, state), n in sorted(view.alert_counts.items()):
            b.add("gpufleet_alerts", (rule, severity, state), n)

    def _collector(self, b: Scrape, view: ScrapeView) -> None:
        view.check("collector")
        b.add("gpufleet_collector_info", view.identity, 1)
        hosts = view.hosts
        for status in HOST_STATUSES:
            b.add("gpufleet_collector_hosts", (status,), sum(1 for h in hosts if h.status == status))
        lags = [h.lag for h in hosts if h.status == "up" and h.lag is not None]
        if lags:
            b.add("gpufleet_collector_lag_seconds", (), max(lags))
        stats = dict(view.stats)
        # counters derived from the live view when stats() does not give them
        stats.setdefault("frames_total", float(sum(h.frames for h in hosts)))
        stats.setdefault("bad_frames_total", float(sum(h.bad_frames for h in hosts)))
        stats.setdefault("reconnects_total", float(sum(h.reconnects for h in hosts)))
        for key, value in sorted(stats.items()):
            name = stat_metric_name(key)
            if name is None or value is None or not math.isfinite(value):
                continue
            b.add_spec(Spec(name, "counter" if name.endswith("_total") else "gauge",
                            f"Collector statistic {key}."))
            b.add(name, (), value)


def _holdings(g: sample.GpuSample, key: Callable[[sample.ProcessSample], tuple[str, ...] | None],
              ) -> tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int | None]]:
    """Processes and memory per holder (a user, a pod; ``key`` None: not one) of one GPU; the memory is None
    when none of the holder's processes has a reading (never a fake 0)."""
    memory: dict[tuple[str, ...], int | None] = {}
    count: dict[tuple[str, ...], int] = {}
    for p in g.processes:
        k = key(p)
        if k is None:
            continue
        count[k] = count.get(k, 0) + 1
        held = memory.get(k)
        if p.gpu_memory is not None:
            memory[k] = (held or 0) + p.gpu_memory
        else:
            memory.setdefault(k, None)
    return count, memory


# ---------------------------------------------------------------------------------------- HTTP server

_INDEX = (b"<!doctype html><html><head><title>gpufleet collector</title></head><body>"
          b"<h1>gpufleet collector</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n")


def _render(collector: FleetCollector, view: ScrapeView, process: ProcessCollector, openmetrics: bool,
            compress: bool) -> bytes:
    """Runs in a thread: the samples from the copied view, the text (the process collector's series last,
    as prometheus_client's registry order had them), compressed when asked."""
    with no_cycle_collection():  # ~250,000 short-lived objects at 1,000 hosts
        body = collector.build(view).render(openmetrics=openmetrics, extra=process.collect())
    # level 1: half the CPU of level 5 for 10 % more bytes (0.9 MB for 20 MB of text at 1,000 hosts)
    return gzip.compress(body, compresslevel=1) if compress else body


class MetricsServer(HttpServer):
    """Serves ``GET /metrics`` from a dedicated registry (never the process-global one).

    One request per connection (``Connection: close``); the request head is bounded in size and time so
    a slow or hostile client holds at most one slot of ``max_connections`` for ``read_timeout`` seconds.
    """

    what = "metrics"

    def __init__(self, source: Running, listen: str, *, read_timeout: float = 5.0,
                 write_timeout: float = 10.0, max_header_bytes: int = 16384,
                 max_connections: int = 32, dcgm_names: bool = False) -> None:
        super().__init__(listen, "metrics.listen", read_timeout=read_timeout, write_timeout=write_timeout,
                         max_header_bytes=max_header_bytes, max_connections=max_connections, path="/metrics")
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = FleetCollector(source, dcgm_names=dcgm_names)
        self.registry.register(self.collector)
        # process_* series: the collector's own RSS, CPU, open fds
        self._process = ProcessCollector(registry=self.registry)

    # ------------------------------------------------------------------------------------- requests

    async def _route(self, req: Request, writer: asyncio.StreamWriter) -> None:
        method, path, headers = req.method, req.path, req.headers
        if path not in ("/", "/metrics"):
            await self._respond(writer, 404, b"not found; try /metrics\n", head_only=method == "HEAD")
            return
        if method not in ("GET", "HEAD"):
            await self._respond(writer, 405, b"only GET\n", extra=[("Allow", "GET, HEAD")])
            return
        if path == "/":
            await self._respond(writer, 200, _INDEX, "text/html; charset=utf-8", head_only=method == "HEAD")
            return
        compress = gzip_accepted(headers.get("accept-encoding", ""))
        try:
            _encoder, content_type = choose_encoder(headers.get("accept", ""))
            openmetrics = content_type.startswith("application/openmetrics-text")
            # Copy the live view here, on the loop that mutates it (cheap); build the families, format
            # and compress (~0.3 s per 1000 GPUs) in a thread so ingest keeps flowing during a scrape.
            view = self.collector.freeze()
            body = await self.in_thread(_render, self.collector, view, self._process, openmetrics, compress)
        except Exception as exc:  # noqa: BLE001
            log.exception("metrics: exposition failed")
            await self._respond(writer, 500, f"exposition failed: {exc}\n".encode())
            return
        extra = [("Content-Encoding", "gzip")] if compress else []
        await self._respond(writer, 200, body, content_type, extra=extra, head_only=method == "HEAD")

    async def _respond(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                       content_type: str = "text/plain; charset=utf-8", *,
                       extra: Sequence[tuple[str, str]] = (), head_only: bool = False) -> None:
        await respond(writer, status, body, content_type, timeout=self.write_timeout, extra=extra,
                      head_only=head_only)
