"""Load shedding for the store's write queue: when writes fall behind, keep every k-th snapshot of each
host instead of losing the newest (or oldest) ones in a block, and say so.

Why evenly: rollups are means and GPU-hours are credited per interval (capped by the GPU's typical
interval), so one sample in ``k`` keeps both close to right, while a block of lost minutes would show as a
gap and bill nobody. The ladder follows the queue's fill (snapshots queued / ``queue_max``): under half
full nothing is shed; then one in 2, 4 and 8 is kept. The queue bound itself (the oldest snapshot dropped,
counted as ``dropped``) stays as the last resort.

Nothing is shed silently: per host a ``collector_shed`` event marks the gap in its history (when shedding
of that host stops, and once a minute while it goes on), the counts are in ``Store.shed`` and
``Store.shed_by_host`` (``gpufleet hosts``, /metrics), and ``on_change`` raises and resolves the
``collector_overloaded`` alert. An episode ends after ``QUIET`` seconds without a shed snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gpufleet.agent import wire

log = logging.getLogger(__name__)

#: (queue fill at least, keep one snapshot in k per host), checked from the top
LADDER: Final[tuple[tuple[float, int], ...]] = ((0.9, 8), (0.75, 4), (0.5, 2))
QUIET: Final = 10.0  # seconds without shedding that end an episode
REPORT_EVERY: Final = 60.0  # a long episode marks each host's gap at least this often
EVENT_KIND: Final = "collector_shed"


def keep_one_in(fill: float) -> int:
    """How many snapshots per host make one that is kept, at this queue fill (0..1+)."""
    for at_least, k in LADDER:
        if fill >= at_least:
            return k
    return 1


@dataclass(slots=True)
class _HostGap:
    first: float  # frame time of the first snapshot not stored in this stretch
    last: float  # ... and of the last one
    count: int = 0
    reported_at: float = 0.0  # collector clock


class Shedder:
    """Decides, per snapshot, whether the writer queues it; counts and reports what it sheds."""

    def __init__(self, *, clock: Callable[[], float] = time.time,
                 on_change: Callable[[bool, str | None], None] | None = None) -> None:
        self.clock = clock
        self.on_change = on_change
        self.keep_one_in = 1  # the level now
        self.peak_keep_one_in = 1  # the highest level of the current (or last) episode
        self.total = 0  # snapshots shed since start
        self.by_host: dict[str, int] = {}  # host -> snapshots shed since start
        self.active = False
        self._seq: dict[str, int] = {}
        self._gaps: dict[str, _HostGap] = {}
        self._last_shed = 0.0

    def admit(self, host: str, fill: float, ts: float) -> bool:
        """True to queue this snapshot of ``host`` (frame time ``ts``); False: shed (counted, its gap
        reported later)."""
        k = keep_one_in(fill)
        self.keep_one_in = k
        if k == 1:
            return True
        seq = self._seq.get(host, 0) + 1
        self._seq[host] = seq
        if seq % k == 0:
            return True
        now = self.clock()
        self.total += 1
        self.by_host[host] = self.by_host.get(host, 0) + 1
        gap = self._gaps.get(host)
        if gap is None:
            gap = self._gaps[host] = _HostGap(first=ts, last=ts, reported_at=now)
        gap.first, gap.last, gap.count = min(gap.first, ts), max(gap.last, ts), gap.count + 1
        self._last_shed = now
        self.peak_keep_one_in = max(self.peak_keep_one_in, k) if self.active else k
        if not self.active:
            self.active = True
            self._changed(True, self.describe(now))
        return False

    def due(self) -> list[tuple[str, wire.Event]]:
        """Gap markers to store now (one event per host), and the end of an episode when it is quiet."""
        now = self.clock()
        ended = self.active and now - self._last_shed >= QUIET
        out: list[tuple[str, wire.Event]] = []
        for host, gap in list(self._gaps.items()):
            if ended or now - gap.reported_at >= REPORT_EVERY:
                out.append((host, self._event(gap, now)))
                del self._gaps[host]
        if ended:
            self.active = False
            self._seq.clear()
            self._changed(False, None)
        return out

    def describe(self, now: float) -> str:
        hosts = len(self._gaps)
        return (f"the store cannot keep up: keeping 1 of every {self.peak_keep_one_in} snapshots per host "
                f"({self.total} not stored so far, {hosts} host{'s' if hosts != 1 else ''} affected)")

    def _event(self, gap: _HostGap, now: float) -> wire.Event:
        return wire.Event(ts=gap.first, kind=EVENT_KIND,
                          message=f"collector overloaded: {gap.count} snapshots not stored between "
                                  f"{_hms(gap.first)} and {_hms(gap.last)} (kept 1 in "
                                  f"{self.peak_keep_one_in})")

    def _changed(self, active: bool, message: str | None) -> None:
        if active:
            log.warning("store: %s", message)
        else:
            log.warning("store: caught up; shedding stopped (%d snapshots not stored in all)", self.total)
        if self.on_change is not None:
            try:
                self.on_change(active, message)
            except Exception:  # noqa: BLE001 - a broken callback must not stop ingest
                log.exception("store: on_overload_change callback failed")


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))
