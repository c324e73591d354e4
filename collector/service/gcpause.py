"""The collector process and Python's cycle collector: its thresholds for a daemon, and holding it off while
a thread builds a large, short-lived answer.

Thresholds (:func:`tune_for_daemon`, set once by ``gpufleet collector run``): with Python's defaults (a
young collection every 700 net allocations) the daemon spent about a third of its CPU in the cycle
collector (150 hosts of 8 GPUs x 8 processes: 0.9-1.2 s of collection per 5 s, 4 full collections of the
whole heap in them), because every snapshot's few hundred objects live about a second, long enough to be
promoted and to count towards the full collections that walk every host's state. Decoded frames, the live
view and the rules make no reference cycles in the steady state (reference counting frees them), so
collecting every DAEMON_THRESHOLDS[0] net allocations instead finds the same garbage at a small fraction
of the cost (tests/bench/daemon_bench.py: 3.7 -> 2.1-2.6 ms of CPU per host-sample). What startup built
(modules, the config) is frozen out of every collection.

The web page's state and a /metrics scrape each make some 100,000-250,000 objects that reference counting
frees as soon as the answer is written. While they live, every collection promotes them, so the collector
ends up walking the whole heap (the live view included): 100-200 ms pauses of the event loop at 1,000
hosts, in whichever thread they fell, and about a quarter of a scrape's build time. The builds make no
reference cycles, so nothing is left over for the collector afterwards. One lock: the builds take turns,
so one cannot switch the collector back on under another.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator

_GC_LOCK = threading.Lock()

#: (young, middle, old) for gc.set_threshold in the daemon; the defaults are (700, 10, 10)
DAEMON_THRESHOLDS = (100_000, 20, 10)


class CycleStats:
    """Collections the cycle collector ran and the seconds they took (gc.callbacks), for the collector's
    stats (``gc_collections_total``, ``gc_seconds_total``: an operator sees what share of its CPU the
    collector loses to them)."""

    def __init__(self) -> None:
        self.collections = 0
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.collections += 1
            self.seconds += time.perf_counter() - self._started


#: Set by :func:`tune_for_daemon`: the daemon's collections since it was tuned (None: not the daemon).
DAEMON_CYCLES: CycleStats | None = None


def tune_for_daemon() -> None:
    """Once, in the collector process before it starts: freeze what exists, raise the thresholds (see the
    module docstring) and count the collections from then on. Not in library use: a test process keeps
    Python's defaults."""
    global DAEMON_CYCLES
    gc.collect()
    gc.freeze()
    gc.set_threshold(*DAEMON_THRESHOLDS)
    if DAEMON_CYCLES is None:
        DAEMON_CYCLES = CycleStats()
        gc.callbacks.append(DAEMON_CYCLES)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """No cycle collection while the block runs (see the module docstring)."""
    with _GC_LOCK:
        was = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
