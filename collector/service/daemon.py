"""The collector daemon: wires transport -> live view / store / alert engine, and serves queries and metrics.

Lifecycle (modelled on uvicorn's server): ``start()`` brings the parts up in dependency order (store first,
transport last, so no frame arrives before its consumers exist), ``serve_forever()`` waits for SIGTERM/SIGINT
or :meth:`stop`, and ``stop()`` tears down in reverse with a timeout so a stuck host or notifier can never
keep the process alive or lose committed history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable

from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.api.server import QueryServer
from gpufleet.collector.faces.metrics.exporter import MetricsServer
from gpufleet.collector.faces.web.server import WebServer
from gpufleet.collector.fleet.jobs import JobTracker
from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.fleet.maintenance import Maintenance
from gpufleet.collector.fleet.report import ReportFormat, WasteReport
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import JobRecord
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.notify.jobnotes import job_note
from gpufleet.collector.notify.reports import send_report
from gpufleet.collector.service import gcpause
from gpufleet.collector.settings import Config
from gpufleet.collector.store.store import Store, Tuning
from gpufleet.collector.transport.manager import FleetTransport

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL = 60.0
STORE_CLOSE_TIMEOUT = 35.0  # above the store's own close_timeout (30 s), which bounds it
NOTIFY_COUNTERS = ("submitted", "sent", "failed", "dropped", "retries")


class Collector:
    """One collector process. Attributes are what the query API and metrics read."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 store_tuning: Tuning | None = None) -> None:
        self.config = config
        self.clock = clock
        #: the store's knobs (not configuration): Tuning.for_fleet unless a test or bench gives its own
        self.store_tuning = store_tuning
        self.live = LiveView()
        for host in config.hosts:
            self.live.add_host(host.name, host.tags, since=clock())
        self.started_at = clock()
        self._store: Store | None = None
        self._alerts: AlertEngine | None = None
        self._dispatcher: NotificationDispatcher | None = None
        self._jobs: JobTracker | None = None
        self._transport: FleetTransport | None = None
        self._api: QueryServer | None = None
        self._metrics: MetricsServer | None = None
        self._web: WebServer | None = None
        self._windows: Maintenance | None = None  # host maintenance windows (not the store's upkeep below)
        self._maintenance: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._running = False
        self._closed = False  # stop() ran: a second one (serve_forever after a failed start) does nothing

    # ------------------------------------------------------------------ parts (valid after start)
    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("collector not started")
        return self._store

    @property
    def alerts(self) -> AlertEngine:
        if self._alerts is None:
            raise RuntimeError("collector not started")
        return self._alerts

    @property
    def transport(self) -> FleetTransport:
        if self._transport is None:
            raise RuntimeError("collector not started")
        return self._transport

    @property
    def maintenance(self) -> Maintenance:
        """The host maintenance windows (collector/maintenance.py), for the query API."""
        if self._windows is None:
            raise RuntimeError("collector not started")
        return self._windows

    @property
    def api_socket(self) -> str:
        return str(self.config.api.resolved_socket())

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics is not None else None

    @property
    def web_url(self) -> str | None:
        """The page's address while ``web.enabled`` (the real port when listen asked for port 0)."""
        return self._web.url if self._web is not None else None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        cfg = self.config
        thresholds = thresholds_of(cfg.rules)  # the one classification's, for the store, rules and jobs
        self._store = await Store.open(cfg.storage, thresholds=thresholds,
                                       tuning=self.store_tuning or Tuning.for_fleet(len(cfg.hosts)))
        try:
            seeded = self.live.carry_over(await self._store.hosts(), await self._store.latest())
            if seeded:
                log.info("carried over the last known state of %d hosts from %s", seeded,
                         cfg.storage.resolved_path())
            notifiers = build_notifiers(cfg.notifiers, cfg.alerting)
            self._dispatcher = NotificationDispatcher(
                notifiers, queue_size=cfg.alerting.queue_size, clock=self.clock, store=self._store,
                backoff=cfg.alerting.retry_backoff, max_backoff=cfg.alerting.retry_backoff_max)
            facts = FleetFacts(thresholds)  # each snapshot classified once: rules, job tracker, GPU-hours
            self._store.facts = facts
            self._alerts = AlertEngine(cfg, self._store, clock=self.clock, dispatcher=self._dispatcher,
                                       facts=facts)
            self._store.on_health_change = self._alerts.storage_health
            self._store.on_overload_change = self._alerts.collector_overload
            await self._alerts.start()
            # before the transport exists: a host still in maintenance after a restart is never dialled
            self._windows = Maintenance(self._store, self.live, self._alerts, [h.name for h in cfg.hosts],
                                        shard=cfg.shard is not None, clock=self.clock)
            await self._windows.load()

            self._api = QueryServer(self, cfg.api.resolved_socket(), cfg.api.mode)
            await self._api.start()
            if cfg.metrics.listen:
                self._metrics = MetricsServer(self, cfg.metrics.listen, dcgm_names=cfg.metrics.dcgm_names)
                await self._metrics.start()
            if cfg.web.enabled:
                self._web = WebServer(self, cfg.web)
                await self._web.start()

            self._jobs = JobTracker(self._store.save_jobs, firing=self.firing,
                                    intervals={h.name: h.interval for h in cfg.hosts},
                                    facts=facts,
                                    note=self._job_note if cfg.alerting.job_notes else None)
            self.live.listeners = [self._store, self._alerts, self._jobs]
            self._transport = FleetTransport(cfg.hosts, self.live, clock=self.clock,
                                             max_concurrent_connects=cfg.max_concurrent_connects)
            self._windows.attach(self._transport)
            await self._transport.start()
            self._windows.start()
        except BaseException:
            await self.stop()
            raise
        self._maintenance = asyncio.create_task(self._maintenance_loop(), name="store-maintenance")
        self._running = True
        log.info("collector started: %d hosts, socket %s", len(cfg.hosts), self.api_socket)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop in reverse order. Each part gets a share of ``timeout``; the store is always closed last
        so everything already received is committed."""
        self._running = False
        if self._closed:
            return
        self._closed = True
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
            self._maintenance = None
        share = max(timeout / 4, 1.0)
        if self._windows is not None:  # no window ends (and dials a host) while we stop
            await self._guard("maintenance windows", self._windows.stop(), share)
        if self._alerts is not None:
            # our own hang-ups are not hosts going down: the engine stops judging and listening first (its
            # tick, left running while the transport closes, would read the quiet as every host down)
            await self._guard("alert engine", self._alerts.halt(), share)
            if self._alerts in self.live.listeners:
                self.live.listeners.remove(self._alerts)
        if self._web is not None:  # before the transport: open pages never see our hang-ups as hosts down
            await self._guard("web", self._web.stop(), share)
            self._web = None
        if self._transport is not None:
            await self._guard("transport", self._transport.stop(timeout=share), share + 1)
            self._transport = None
        if self._metrics is not None:
            await self._guard("metrics", self._metrics.stop(), share)
            self._metrics = None
        if self._api is not None:
            await self._guard("query api", self._api.stop(), share)
            self._api = None
        if self._alerts is not None:
            await self._guard("alert engine", self._alerts.stop(), share + 1)
        if self._jobs is not None:
            await self._guard("job records", self._jobs.drain(), share)
        if self._store is not None:
            # the store drains its queue on close: never cut that short, or received frames are lost
            await self._guard("store", self._store.close(), max(share + 5, STORE_CLOSE_TIMEOUT))
        self._stopped.set()

    async def _guard(self, what: str, aw: Awaitable[object], timeout: float) -> None:
        try:
            await asyncio.wait_for(aw, timeout)
        except asyncio.TimeoutError:
            log.error("stopping %s timed out after %.0f s", what, timeout)
        except Exception:
            log.exception("stopping %s failed", what)

    def request_stop(self) -> None:
        """Ask :meth:`serve_forever` to return (signal-safe)."""
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Run until SIGTERM/SIGINT or :meth:`request_stop`, then stop cleanly."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
                installed.append(sig)
        try:
            if not self._running:
                await self.start()
            await self._stopped.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def _maintenance_loop(self) -> None:
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL)
            try:
                await self.store.run_maintenance(self.clock())
            except Exception:
                log.exception("store maintenance failed")

    # ------------------------------------------------------------------ read side (API, metrics)
    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        counts: dict[tuple[str, str, str], int] = {}
        if self._alerts is None:
            return counts
        for alert in self._alerts.active():
            key = (alert.rule, alert.severity, alert.state)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def firing(self) -> Firing:
        """Which rules fire where (the alert engine's answer; nothing before it starts)."""
        return self._alerts.firing() if self._alerts is not None else Firing()

    async def send_report(self, report: WasteReport, fmt: ReportFormat) -> dict[str, str | None]:
        """``gpufleet report --send``: through the configured notifiers now (fresh ones: the alert
        dispatcher's queue and retries are for alerts)."""
        notifiers = build_notifiers(self.config.notifiers, self.config.alerting)
        if not notifiers:
            raise QueryError("no notifiers configured: add one under 'notifiers:' to send reports")
        return await send_report(report, notifiers, fmt=fmt)

    def _job_note(self, record: JobRecord) -> None:
        """``alerting.job_notes``: the user's end-of-job note, through the user notifier."""
        note = job_note(record, self.config.alerting, self.clock())
        if note is not None and self._dispatcher is not None:
            self._dispatcher.submit(note)

    def identity(self) -> tuple[str, str]:
        """(collector name, shard "I/N" or ""): the labels of gpufleet_collector_info."""
        return socket.gethostname(), str(self.config.shard) if self.config.shard else ""

    def stats(self) -> dict[str, float]:
        hosts = self.live.hosts.values()
        lags = [h.lag for h in hosts if h.lag is not None and h.status == "up"]
        out: dict[str, float] = {
            "uptime_seconds": self.clock() - self.started_at,
            "hosts_total": float(len(self.live.hosts)),
            "hosts_up": float(sum(1 for h in hosts if h.status == "up")),
            "frames_total": float(sum(h.frames for h in hosts)),
            "bad_frames_total": float(sum(h.bad_frames for h in hosts)),
            "reconnects_total": float(sum(h.reconnects for h in hosts)),
            "lag_max_seconds": max(lags, default=0.0),
        }
        if self._store is not None:
            out["store_queue_depth"] = float(self._store.queue_depth)
            out["store_queue_bytes"] = float(self._store.queue_bytes)
            out["store_dropped_total"] = float(self._store.dropped)
            out["store_refused_total"] = float(self._store.refused)
            out["store_shed_total"] = float(self._store.shed)
            out["store_keep_one_in"] = float(self._store.keep_one_in)
            out["store_healthy"] = 1.0 if self._store.healthy else 0.0
        if self._alerts is not None:
            out["notify_queue_depth"] = float(self._alerts.queue_depth)
            notify = self._alerts.stats
            for key in NOTIFY_COUNTERS:  # running totals only; alert levels have their own gauge
                out[f"notifications_{key}_total"] = float(notify.get(key, 0))
        cycles = gcpause.DAEMON_CYCLES
        if cycles is not None:  # the daemon process (run_collector): its cycle collector's share of the CPU
            out["gc_collections_total"] = float(cycles.collections)
            out["gc_seconds_total"] = cycles.seconds
        return out


async def run_collector(config: Config) -> None:
    """Entry point for ``gpufleet collector run``."""
    gcpause.tune_for_daemon()  # this process is the daemon: its cycle-collector thresholds (gcpause.py)
    await Collector(config).serve_forever()
