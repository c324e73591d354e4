"""Delivers notifications off the engine's path, through the notification log (notify.nflog).

Per destination: one worker and at most ``concurrency`` attempts at a time, so a destination that hangs or
is down delays no other. Per (group, destination): the newest state waits in the log until the destination
accepts it. A retryable failure (5xx, connection error, timeout, a command's non-zero exit) is retried with
capped exponential backoff (``backoff`` doubling up to ``max_backoff``) until delivered or superseded by a
newer state of the group (then that one is sent, keeping the backoff, so a flapping group cannot hammer a
failing receiver). A final failure (4xx) drops that state. A group state the destination already accepted
(same firing set, no newly resolved alerts, repeat not due: nflog.is_news) is not sent again.
:meth:`persist` saves the log so a restart goes on retrying; :meth:`failing` says which destinations have
refused everything since when.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable

from gpufleet.collector.notify import nflog
from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier, prepare_for
from gpufleet.collector.secrets import redact_text

log = logging.getLogger(__name__)
#: A notifier enforces its own timeout; this backstop (timeout + grace) catches one that does not.
SEND_GRACE = 5.0
#: attempts in flight at once per destination
PER_DESTINATION = 4
SETTLE_POLL = 0.01


class NotificationDispatcher:
    def __init__(self, notifiers: list[Notifier], *, queue_size: int = 1000,
                 clock: Callable[[], float] = time.time, backoff: float = 1.0, max_backoff: float = 300.0,
                 concurrency: int = PER_DESTINATION, store: nflog.NflogStore | None = None) -> None:
        self.notifiers = list(notifiers)
        self.clock = clock
        self.backoff, self.max_backoff = backoff, max(backoff, max_backoff)
        self.queue_size = max(1, queue_size)
        self.concurrency = max(1, concurrency)
        self.store = store
        self._log: dict[str, dict[str, nflog.Entry]] = {n.name: {} for n in self.notifiers}
        self._wake: dict[str, asyncio.Event] = {n.name: asyncio.Event() for n in self.notifiers}
        self._attempts: dict[str, set[asyncio.Task[None]]] = {n.name: set() for n in self.notifiers}
        self._failing: dict[str, float] = {}  # destination -> wall time of its first failure since a success
        self._dirty: set[tuple[str, str]] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._closed = False
        self.stats: dict[str, int] = {"submitted": 0, "sent": 0, "failed": 0, "dropped": 0, "retries": 0,
                                      "superseded": 0, "unchanged": 0}
        self.last_error: dict[str, str] = {}  # notifier -> last failure (already free of secrets)

    # ------------------------------------------------------------------------------------ reading

    @property
    def queue_depth(self) -> int:
        return sum(1 for entries in self._log.values() for e in entries.values() if e.pending is not None)

    def refresh_notifiers(self) -> list[Notifier]:
        return [n for n in self.notifiers if n.refresh_interval]

    def failing(self) -> dict[str, float]:
        """Destination -> since when every attempt failed (only those failing now)."""
        return dict(self._failing)

    def undelivered(self, group_key: str) -> dict[str, float]:
        """Destination -> since when this group's newest state has failed to get there."""
        out: dict[str, float] = {}
        for name, entries in self._log.items():
            e = entries.get(group_key)
            if e is not None and e.pending is not None and e.failing_since is not None:
                out[name] = e.failing_since
        return out

    def entries(self) -> list[nflog.Entry]:
        return [e for entries in self._log.values() for e in entries.values()]

    # ------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load the persisted log (undelivered states are retried at once), start the workers. Idempotent."""
        if self._workers or self._closed:
            return
        if self.store is not None:
            await self._load()
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._work(n), name=f"notify-{n.name}") for n in self.notifiers]

    async def _load(self) -> None:
        assert self.store is not None
        now = self.clock()
        try:
            rows = await self.store.load_nflog(since=now - nflog.KEEP_DELIVERED)
        except Exception as exc:  # noqa: BLE001 - deliver from now on rather than not at all
            log.error("could not load the notification log: %s", exc)
            return
        due = asyncio.get_running_loop().time()
        for row in rows:
            if row.notifier not in self._log:
                continue  # that destination is no longer configured
            try:
                e = nflog.from_record(row, due)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("notification log: unreadable entry %s for %s: %s",
                            row.group_key, row.notifier, exc)
                continue
            self._log[row.notifier][row.group_key] = e
            if e.failing_since is not None:
                since = self._failing.get(e.notifier, e.failing_since)
                self._failing[e.notifier] = min(since, e.failing_since)
        pending = sum(1 for r in rows if r.pending is not None)
        if pending:
            log.info("notification log: %d undelivered notifications to retry", pending)

    async def persist(self) -> None:
        """Save the entries changed since the last call (the engine calls this every tick and at stop)."""
        if self.store is None or not self._dirty:
            return
        keys, self._dirty = self._dirty, set()
        rows = [nflog.to_record(self._log[n][k]) for n, k in keys if k in self._log.get(n, {})]
        try:
            await self.store.save_nflog(rows, prune_before=self.clock() - nflog.KEEP_DELIVERED)
        except BaseException as exc:
            self._dirty |= keys
            if not isinstance(exc, Exception):
                raise
            log.warning("could not save the notification log: %s", exc)

    async def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight and every state is delivered, dropped, or has failed its
        notifier's ``retries`` + 1 attempts (it goes on being retried); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._settled(loop.time()):
            if deadline is not None and loop.time() >= deadline:
                return False
            await asyncio.sleep(SETTLE_POLL)
        return True

    def _settled(self, now: float) -> bool:
        if any(self._attempts.values()):
            return False
        budget = {n.name: max(0, n.config.retries) + 1 for n in self.notifiers}
        return not any(e.pending is not None and e.attempts < budget[e.notifier] for e in self.entries())

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, let due attempts finish for up to ``timeout`` s, then cancel; save the log (what is
        undelivered is retried after a restart)."""
        self._closed = True
        if self._workers:
            await self.join(timeout)
        tasks = [*self._workers, *(t for ts in self._attempts.values() for t in ts)]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        for e in self.entries():
            e.in_flight = None
        await self.persist()
        for notifier in self.notifiers:
            with contextlib.suppress(Exception):
                await notifier.close()

    # ------------------------------------------------------------------------------------ submitting

    def submit(self, notification: Notification) -> bool:
        """Make this the newest state of its group for every destination that wants it; False when some
        destination's log was full (or we are stopping)."""
        if not notification.created_at:
            notification.created_at = self.clock()
        ok = True
        for notifier in self.notifiers:
            entries = self._log[notifier.name]
            e = entries.get(notification.group_key)
            prepared = prepare_for(notifier, notification)
            if prepared is None:
                if e is not None and e.pending is not None:  # superseded by a state it does not take
                    e.pending = None
                    self._touch(e)
                continue
            if e is not None and e.pending is None and not nflog.is_news(e.delivered, prepared):
                self.stats["unchanged"] += 1  # the destination already shows this state
                continue
            if self._closed:
                self.stats["dropped"] += 1
                ok = False
                continue
            if e is None:
                if self._pending_count(notifier.name) >= self.queue_size:
                    self.stats["dropped"] += 1
                    ok = False
                    log.warning("notifier %s: log full, dropped a %s notification", notifier.describe(),
                                notification.kind)
                    continue
                e = entries[notification.group_key] = nflog.Entry(notification.group_key, notifier.name)
            if e.pending is not None:
                self.stats["superseded"] += 1
            e.pending = prepared
            if e.failing_since is None:
                e.due = asyncio.get_running_loop().time()
            self._touch(e)
            self.stats["submitted"] += 1
            self._wake[notifier.name].set()
        return ok

    def _pending_count(self, name: str) -> int:
        return sum(1 for e in self._log[name].values() if e.pending is not None)

    def _touch(self, e: nflog.Entry) -> None:
        e.updated_at = self.clock()
        self._dirty.add((e.notifier, e.group_key))

    async def deliver_now(self, notification: Notification) -> dict[str, str | None]:
        """Send directly (not logged), with each notifier's ``retries``.

        Returns name -> None on success or the error."""
        results: dict[str, str | None] = {}
        for notifier in self.notifiers:
            prepared = prepare_for(notifier, notification)
            if prepared is None:
                continue
            attempts = max(0, notifier.config.retries) + 1
            for attempt in range(attempts):
                error, retryable = await self._try(notifier, prepared)
                if error is None or not retryable or attempt == attempts - 1:
                    break
                self.stats["retries"] += 1
                await asyncio.sleep(self._delay(attempt + 1))
            results[notifier.name] = error
            if error is not None:
                self.stats["failed"] += 1
                log.warning("%s (%s notification given up)", error, notification.kind)
        return results

    # ------------------------------------------------------------------------------------ delivering

    def _delay(self, attempts: int) -> float:
        return float(min(self.max_backoff, self.backoff * (2 ** max(0, attempts - 1))))

    async def _work(self, notifier: Notifier) -> None:
        loop = asyncio.get_running_loop()
        name, wake, running = notifier.name, self._wake[notifier.name], self._attempts[notifier.name]
        while True:
            wake.clear()
            now = loop.time()
            next_due: float | None = None
            for e in sorted(self._log[name].values(), key=lambda e: e.due):
                if e.pending is None or e.in_flight is not None:
                    continue
                if e.due > now:
                    next_due = e.due if next_due is None else min(next_due, e.due)
                    continue
                if len(running) >= self.concurrency:
                    break  # a finishing attempt wakes us
                e.in_flight = e.pending
                task = loop.create_task(self._attempt(notifier, e, e.pending))
                running.add(task)
                task.add_done_callback(running.discard)
                task.add_done_callback(lambda _t: wake.set())
            wait = None if next_due is None else max(0.0, next_due - now)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), wait)

    async def _attempt(self, notifier: Notifier, e: nflog.Entry, n: Notification) -> None:
        error, retryable = await self._try(notifier, n)
        now, name = self.clock(), notifier.name
        e.in_flight = None
        if error is None:
            self.stats["sent"] += 1
            self.last_error.pop(name, None)
            self._failing.pop(name, None)
            e.delivered_at, e.delivered = now, nflog.summary(n)
            e.attempts, e.failing_since, e.last_error = 0, None, None
            if e.pending is n:
                e.pending = None
            e.due = asyncio.get_running_loop().time()  # a newer state that came meanwhile goes at once
        else:
            self.last_error[name] = error
            self._failing.setdefault(name, now)
            if not retryable:
                self.stats["failed"] += 1
                log.warning("%s (%s notification %s given up)", error, n.kind, n.group_key)
                if e.pending is n:
                    e.pending = None
                e.attempts, e.failing_since = 0, None
            else:
                e.attempts += 1
                if e.failing_since is None:
                    e.failing_since = now
                e.last_error = error
                delay = self._delay(e.attempts)
                e.due = asyncio.get_running_loop().time() + delay
                budget = max(0, notifier.config.retries) + 1
                if e.attempts == budget:  # counted once: the state failed its retries; it goes on
                    self.stats["failed"] += 1
                    log.warning("%s (%s notification %s undelivered after %d attempts; retried until "
                                "delivered, next in %.1f s)", error, n.kind, n.group_key, e.attempts, delay)
                else:
                    self.stats["retries"] += 1
                    log.info("%s; %s notification %s: retry %d in %.1f s", error, n.kind, n.group_key,
                             e.attempts, delay)
        self._touch(e)

    async def _try(self, notifier: Notifier, n: Notification) -> tuple[str | None, bool]:
        """One attempt: (None, _) when accepted, else (the error free of secrets, retryable?)."""
        try:
            await asyncio.wait_for(notifier.send(n), notifier.timeout + SEND_GRACE)
            return None, False
        except DeliveryError as exc:
            return str(exc), exc.retryable
        except asyncio.TimeoutError:
            limit = notifier.timeout + SEND_GRACE
            return f"notifier {notifier.name}: timed out after {limit:g} s", True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken channel must not kill its worker
            # the exception text may quote the URL (urllib's "unknown url type: '...'"): scrub it, and
            # never hand exc_info to logging, which would print the raw text
            detail = redact_text(str(exc), notifier.secret_values)
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            log.debug("notifier %s raised: %s", notifier.describe(),
                      redact_text(trace, notifier.secret_values))
            return f"notifier {notifier.name}: {type(exc).__name__}: {detail}", False
