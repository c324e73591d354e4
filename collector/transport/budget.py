"""Per-host budgets: one agent may not exhaust the collector's memory, disk or time.

Every line costs its size from a bytes bucket before it is even parsed; every event costs one from an events
bucket (token buckets: a steady rate plus a burst). What does not fit is dropped and counted, never queued,
and summarised as one ``rate_limited`` event per ``summary_interval`` (so history says what was lost); the
host is flagged ``over_budget`` until a whole interval passes without a drop. A frame with more GPUs than
``max_gpus``, or more distinct GPU UUIDs than that from one host within ``UUID_WINDOW`` (new UUIDs every
frame would grow the GPU table without bound), is refused with a reason: the stream ends and the host
reconnects with backoff.
"""

from __future__ import annotations

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.settings import HostBudget

RATE_LIMITED = "rate_limited"  # the kind of the summary event
UUID_WINDOW = 86400.0  # seconds: distinct GPU UUIDs per host are counted over this window


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = max(rate, 0.0), max(burst, 1.0)
        self.tokens, self.stamp = self.burst, now

    def take(self, n: float, now: float) -> bool:
        elapsed = now - self.stamp
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self.stamp = now
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False


class StreamBudget:
    """One connection's budget (``now`` is monotonic seconds)."""

    def __init__(self, budget: HostBudget, now: float, max_line_bytes: int,
                 uuids: set[str] | None = None) -> None:
        self.budget = budget
        self.bytes = TokenBucket(budget.bytes_per_second, max(budget.bytes_burst, 2 * max_line_bytes), now)
        self.events = TokenBucket(budget.events_per_second, budget.events_burst, now)
        self.uuids: set[str] = set() if uuids is None else uuids  # the host's, across connections if given
        # dropped since the last summary
        self.lines = 0
        self.line_bytes = 0
        self.dropped_events = 0
        self.window_start = now
        self.last_drop: float | None = None  # in the current summary window
        self.recent_drop: float | None = None  # the last drop ever (the host's flag)

    def flagged(self, now: float) -> bool:
        """Over budget: something was dropped less than ``summary_interval`` ago."""
        return self.recent_drop is not None and now - self.recent_drop < self.budget.summary_interval

    def admit_line(self, size: int, now: float) -> bool:
        if self.bytes.take(size, now):
            return True
        self.lines += 1
        self.line_bytes += size
        self._dropped(now)
        return False

    def admit_event(self, event: wire.Event, now: float) -> bool:
        if not self.events.take(1, now):
            self.dropped_events += 1
            self._dropped(now)
            return False
        limit = self.budget.max_event_message
        if len(event.message) > limit:
            event.message = f"{event.message[:limit]}... ({len(event.message) - limit} characters cut)"
        return True

    def check_gpus(self, frame: sample.Snapshot | wire.Hello) -> None:
        """Raises MalformedFrame (the stream ends) when the frame is over the GPU bounds."""
        limit = self.budget.max_gpus
        if len(frame.gpus) > limit:
            raise wire.MalformedFrame(f"{frame.type} has {len(frame.gpus)} GPUs, over the bound of {limit}"
                                      " per host")
        uuids = self.uuids
        for g in frame.gpus:
            if g.uuid not in uuids:
                uuids.add(g.uuid)
                if len(uuids) > limit:
                    uuids.discard(g.uuid)
                    raise wire.MalformedFrame(f"more than {limit} distinct GPU UUIDs from this host in "
                                              f"{UUID_WINDOW / 3600:g} h (new UUIDs every frame?)")

    def _dropped(self, now: float) -> None:
        if self.last_drop is None:
            self.window_start = now
        self.last_drop = self.recent_drop = now

    def summary(self, now: float, wall: float) -> wire.Event | None:
        """The one event that says what was dropped, once ``summary_interval`` has passed since the first
        drop it covers. Resets the counts."""
        if self.last_drop is None or now - self.window_start < self.budget.summary_interval:
            return None
        return self._take_summary(now, wall)

    def final_summary(self, now: float, wall: float) -> wire.Event | None:
        """What was dropped and not yet said (the stream ends)."""
        return None if self.last_drop is None else self._take_summary(now, wall)

    def _take_summary(self, now: float, wall: float) -> wire.Event:
        b = self.budget
        parts = []
        if self.dropped_events:
            parts.append(f"{self.dropped_events} events")
        if self.lines:
            parts.append(f"{self.lines} frames ({self.line_bytes / (1 << 20):.1f} MiB)")
        seconds = max(now - self.window_start, 0.0)
        message = (f"collector dropped {' and '.join(parts)} over this host's budget "
                   f"({b.events_per_second:g} events/s, {b.bytes_per_second / (1 << 20):g} MiB/s) "
                   f"in {seconds:.0f} s")
        self.lines = self.line_bytes = self.dropped_events = 0
        self.last_drop = None
        self.window_start = now
        return wire.Event(ts=wall, kind=RATE_LIMITED, message=message)
