"""Holding off Python's cycle collector while a thread builds a large, short-lived answer.

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
from collections.abc import Iterator

_GC_LOCK = threading.Lock()


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
