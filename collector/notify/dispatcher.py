"""Delivers notifications off the engine's path: one bounded queue and one worker per notifier.

Why per notifier: a channel that is down (retrying with backoff) must not delay the others, and a full
queue drops for that channel only. Retries (exponential backoff, capped) happen only for retryable
failures (5xx, connection errors, timeouts, a command's non-zero exit); a 4xx is final.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable

from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier, prepare_for
from gpufleet.collector.notify.secrets import redact_text

log = logging.getLogger(__name__)
#: A notifier enforces its own timeout; this backstop (timeout + grace) catches one that does not.
SEND_GRACE = 5.0


class NotificationDispatcher:
    def __init__(self, notifiers: list[Notifier], *, queue_size: int = 1000,
                 clock: Callable[[], float] = time.time, backoff: float = 1.0,
                 max_backoff: float = 60.0) -> None:
        self.notifiers = list(notifiers)
        self.clock = clock
        self.backoff, self.max_backoff = backoff, max_backoff
        self._queues: dict[str, asyncio.Queue[Notification]] = {
            n.name: asyncio.Queue(maxsize=max(1, queue_size)) for n in self.notifiers
        }
        self._busy: dict[str, bool] = {n.name: False for n in self.notifiers}
        self._workers: list[asyncio.Task[None]] = []
        self._closed = False
        self.stats: dict[str, int] = {"submitted": 0, "sent": 0, "failed": 0, "dropped": 0, "retries": 0}
        self.last_error: dict[str, str] = {}  # notifier -> last failure (already free of secrets)

    @property
    def queue_depth(self) -> int:
        return sum(q.qsize() for q in self._queues.values()) + sum(self._busy.values())

    def refresh_notifiers(self) -> list[Notifier]:
        return [n for n in self.notifiers if n.refresh_interval]

    async def start(self) -> None:
        """Start the workers (idempotent)."""
        if self._workers or self._closed:
            return
        self._workers = [asyncio.create_task(self._work(n), name=f"notify-{n.name}") for n in self.notifiers]

    def submit(self, notification: Notification) -> bool:
        """Queue for every notifier that wants it; False when some queue was full (or we are stopping)."""
        if not notification.created_at:
            notification.created_at = self.clock()
        ok = True
        for notifier in self.notifiers:
            prepared = prepare_for(notifier, notification)
            if prepared is None:
                continue
            if self._closed:
                self.stats["dropped"] += 1
                ok = False
                continue
            try:
                self._queues[notifier.name].put_nowait(prepared)
                self.stats["submitted"] += 1
            except asyncio.QueueFull:
                self.stats["dropped"] += 1
                ok = False
                log.warning("notifier %s: queue full, dropped a %s notification", notifier.describe(),
                            notification.kind)
        return ok

    async def deliver_now(self, notification: Notification) -> dict[str, str | None]:
        """Send directly (not queued), with the same retries; name -> None on success or the error."""
        results: dict[str, str | None] = {}
        for notifier in self.notifiers:
            prepared = prepare_for(notifier, notification)
            if prepared is not None:
                results[notifier.name] = await self._deliver(notifier, prepared)
        return results

    async def join(self, timeout: float | None = None) -> bool:
        """Wait until every queue is empty and every worker idle; False on timeout."""
        try:
            await asyncio.wait_for(asyncio.gather(*(q.join() for q in self._queues.values())), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, drain for up to ``timeout`` s, then cancel; what is left counts as dropped."""
        self._closed = True
        if self._workers:
            await self.join(timeout)
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        for q in self._queues.values():
            while not q.empty():
                q.get_nowait()
                q.task_done()
                self.stats["dropped"] += 1
        for notifier in self.notifiers:
            with contextlib.suppress(Exception):
                await notifier.close()

    async def _work(self, notifier: Notifier) -> None:
        queue = self._queues[notifier.name]
        while True:
            n = await queue.get()
            self._busy[notifier.name] = True
            try:
                await self._deliver(notifier, n)
            finally:
                self._busy[notifier.name] = False
                queue.task_done()

    async def _deliver(self, notifier: Notifier, n: Notification) -> str | None:
        attempts = max(0, notifier.config.retries) + 1
        for attempt in range(attempts):
            try:
                await asyncio.wait_for(notifier.send(n), notifier.timeout + SEND_GRACE)
                self.stats["sent"] += 1
                self.last_error.pop(notifier.name, None)
                return None
            except DeliveryError as exc:
                error, retryable = str(exc), exc.retryable
            except asyncio.TimeoutError:
                limit = notifier.timeout + SEND_GRACE
                error, retryable = f"notifier {notifier.name}: timed out after {limit:g} s", True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken channel must not kill its worker
                # the exception text may quote the URL (urllib's "unknown url type: '...'"): scrub it, and
                # never hand exc_info to logging, which would print the raw text
                detail = redact_text(str(exc), notifier.secret_values)
                error, retryable = f"notifier {notifier.name}: {type(exc).__name__}: {detail}", False
                trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                log.debug("notifier %s raised: %s", notifier.describe(),
                          redact_text(trace, notifier.secret_values))
            if not retryable or attempt == attempts - 1:
                break
            self.stats["retries"] += 1
            delay = min(self.max_backoff, self.backoff * (2 ** attempt))
            log.info("%s; retry %d/%d in %.1f s", error, attempt + 1, attempts - 1, delay)
            await asyncio.sleep(delay)
        self.stats["failed"] += 1
        self.last_error[notifier.name] = error
        log.warning("%s (%s notification %s given up)", error, n.kind, n.group_key)
        return error
