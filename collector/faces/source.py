"""What the faces read of the running collector: one typed view for the query API, the web page and /metrics.

:class:`gpufleet.collector.service.daemon.Collector` is a :class:`Running` (mypy checks it where the daemon
hands itself to each face); the tests' stand-ins implement the same methods. Every reader sees the same
three parts (the live view, the store's reads, the alert engine's reads) and the same few answers (stats,
alert counts, which rules fire where, the collector's identity): nothing is looked up by name, and a face
that needs something new adds it here, where every other face and stand-in sees it.
"""

from __future__ import annotations

from typing import Protocol

from gpufleet.collector.fleet.live import LiveView
from gpufleet.collector.fleet.report import ReportFormat, WasteReport
from gpufleet.collector.model import records
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.sample import Snapshot
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.settings import Config


class StoredFleet(Protocol):
    """The store's reads (:class:`gpufleet.collector.store.Store`; the CLI's read-only fallback opens one)."""

    @property
    def shed_by_host(self) -> dict[str, int]: ...
    async def hosts(self) -> list[HostRecord]: ...
    async def latest(self, host: str | None = None) -> dict[str, Snapshot]: ...
    async def gpu_history(self, host: str, *, gpu: int | None = None, since: float, until: float,
                          max_points: int = 500) -> list[records.GpuSeries]: ...
    async def process_history(self, host: str | None = None, *, gpu: int | None = None,
                              user: str | None = None, since: float,
                              until: float) -> list[records.ProcessSpan]: ...
    async def usage_by_user(self, *, since: float, until: float, host: str | None = None,
                            by_host: bool = False, gpu: int | None = None) -> list[records.UsageRow]: ...
    async def capacity(self, *, since: float, until: float,
                       host: str | None = None) -> list[records.CapacityRow]: ...
    async def slurm_usage(self, group: str, *, since: float, until: float,
                          host: str | None = None) -> list[records.SlurmUsageRow]: ...
    async def events(self, *, host: str | None = None, since: float,
                     until: float) -> list[records.EventRow]: ...
    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[records.AlertRecord]: ...
    async def list_silences(self, *, include_expired: bool = False,
                            now: float | None = None) -> list[records.SilenceRecord]: ...
    async def jobs(self, *, since: float, until: float, user: str | None = None,
                   limit: int = 1000) -> list[records.JobRecord]: ...


class AlertReads(Protocol):
    """The alert engine's answers and its silences (:class:`gpufleet.collector.alerts.engine.AlertEngine`)."""

    def active(self) -> list[records.AlertRecord]: ...
    def firing(self) -> Firing: ...
    def is_muted(self, alert: records.AlertRecord) -> bool: ...
    def undelivered(self, alert: records.AlertRecord) -> dict[str, float]: ...
    async def add_silence(self, matchers: dict[str, str], duration: float, comment: str = "",
                          created_by: str = "") -> records.SilenceRecord: ...
    async def list_silences(self, include_expired: bool = False) -> list[records.SilenceRecord]: ...
    async def expire_silence(self, silence_id: int) -> bool: ...


class Running(Protocol):
    """A running collector, as every face reads it."""

    @property
    def config(self) -> Config: ...
    @property
    def live(self) -> LiveView: ...
    @property
    def store(self) -> StoredFleet: ...
    @property
    def alerts(self) -> AlertReads: ...
    @property
    def started_at(self) -> float: ...

    def stats(self) -> dict[str, float]:
        """Collector health: frames_total, store_queue_depth, notify_queue_depth, uptime_seconds, ..."""
        ...

    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        """(rule, severity, state) -> number of active alerts; state is pending or firing."""
        ...

    def firing(self) -> Firing:
        """Which rules fire on which GPU and host now."""
        ...

    def identity(self) -> tuple[str, str]:
        """(collector name, shard "I/N" or ""): how several collectors scraped by one Prometheus differ."""
        ...

    async def send_report(self, report: WasteReport, fmt: ReportFormat) -> dict[str, str | None]:
        """Deliver a report through the configured notifiers now: notifier name -> None (sent) or the
        error; a QueryError when none is configured."""
        ...
