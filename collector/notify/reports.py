"""A waste report as a notification, delivered now through the configured notifiers (``report --send``).

The report itself (its numbers and its text) is collector/fleet/report.py; this is only how it travels.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.collector.fleet.report import ReportFormat, WasteReport, render_report, report_title
from gpufleet.collector.notify.base import Notification, Notifier
from gpufleet.collector.notify.dispatcher import NotificationDispatcher


def report_notification(report: WasteReport, fmt: ReportFormat = "text") -> Notification:
    return Notification(group_key="report", status=None, kind="report", title=report_title(report),
                        body=render_report(report, "markdown" if fmt == "markdown" else "text"),
                        data=report.as_dict(), created_at=report.generated_at)


async def send_report(report: WasteReport, notifiers: Sequence[Notifier] | NotificationDispatcher, *,
                      fmt: ReportFormat = "text") -> dict[str, str | None]:
    """Deliver now (with the notifiers' retries); notifier name -> None when delivered, else the error.

    Alertmanager notifiers take alerts only and are skipped; so is the per-user mailer.
    """
    dispatcher = notifiers if isinstance(notifiers, NotificationDispatcher) else NotificationDispatcher(
        list(notifiers), backoff=1.0)
    return await dispatcher.deliver_now(report_notification(report, fmt))
