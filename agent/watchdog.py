"""Bounded NVML reads: a call that never returns costs one thread and one GPU, never the agent.

After some Xids an NVML call can block in the kernel (D state) for minutes or for good. Read inline, that
stalled the whole sampling loop, so every GPU of the host went unreported while the heartbeat thread kept
the host looking healthy (issue 32, item 9). Python cannot interrupt a thread blocked in a C call, so the
reads run on a worker thread and the sampling thread waits with a deadline: a read still running after
``hang_after`` seconds leaves its worker behind (blocked, with the read it is stuck in), a fresh worker
takes the remaining reads of the sample, and the caller learns which key hung. A hung key is not read again
until its stuck worker returns (:meth:`Reads.stuck`), so at most one thread per GPU is ever blocked.

The handoff costs one queue round trip per sample (all GPUs' reads go as one batch), not one per GPU.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

Job = tuple[Hashable, Callable[[], Any]]


@dataclass(eq=False)
class _Batch:
    jobs: list[Job]
    results: dict[Hashable, Any] = field(default_factory=dict)  # key -> value or the exception raised
    done: threading.Event = field(default_factory=threading.Event)
    current: tuple[Hashable, float] | None = None  # the key being read and since when (monotonic)
    abandoned: bool = False


@dataclass(eq=False)
class Stuck:
    """A read that did not return in time: its key, since when, and the worker still blocked in it."""

    key: Hashable
    since: float  # monotonic
    thread: threading.Thread

    def returned(self) -> bool:
        return not self.thread.is_alive()


class Reads:
    """Runs batches of reads on a worker thread, detecting the ones that hang (module docstring)."""

    def __init__(self, hang_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.hang_after = hang_after
        self.clock = clock
        self._stuck: dict[Hashable, Stuck] = {}
        self._inbox: queue.SimpleQueue[_Batch | None] | None = None
        self._worker: threading.Thread | None = None

    def _start_worker(self) -> queue.SimpleQueue[_Batch | None]:
        inbox: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, args=(inbox,), name="nvml-reader", daemon=True)
        self._worker.start()
        self._inbox = inbox
        return inbox

    def _work(self, inbox: queue.SimpleQueue[_Batch | None]) -> None:
        while True:
            batch = inbox.get()
            if batch is None:
                return
            for key, fn in batch.jobs:
                if batch.abandoned:  # this worker hung earlier in the batch: another took the rest
                    break
                batch.current = (key, self.clock())
                try:
                    value: Any = fn()
                except BaseException as exc:  # handed to the caller, who decides
                    value = exc
                if batch.abandoned:  # it came back, too late: the caller counted it as hung
                    return
                batch.results[key] = value
            batch.current = None
            batch.done.set()
            if batch.abandoned:
                return

    def stuck(self) -> dict[Hashable, Stuck]:
        """Keys whose read has not returned yet (the caller must not read them again)."""
        for key in [k for k, s in self._stuck.items() if s.returned()]:
            del self._stuck[key]
        return dict(self._stuck)

    def run(self, jobs: Sequence[Job]) -> tuple[dict[Hashable, Any], dict[Hashable, Stuck]]:
        """Run ``jobs`` in order; returns (results by key: value or exception, reads that hung this time)."""
        hung: dict[Hashable, Stuck] = {}
        pending = [j for j in jobs if j[0] not in self.stuck()]
        results: dict[Hashable, Any] = {}
        while pending:
            inbox = self._inbox if self._worker is not None and self._worker.is_alive() else None
            batch = _Batch(list(pending))
            (inbox or self._start_worker()).put(batch)
            while not batch.done.wait(self._wait_for(batch)):
                current = batch.current
                if current is not None and self.clock() - current[1] >= self.hang_after:
                    batch.abandoned = True
                    assert self._worker is not None
                    hung[current[0]] = self._stuck[current[0]] = Stuck(current[0], current[1], self._worker)
                    self._worker = self._inbox = None
                    break
            results.update(batch.results)
            pending = [j for j in pending if j[0] not in batch.results and j[0] not in hung]
        return results, hung

    def _wait_for(self, batch: _Batch) -> float:
        current = batch.current
        if current is None:
            return self.hang_after
        return max(0.01, self.hang_after - (self.clock() - current[1]))

    def close(self) -> None:
        """Let the worker end (a stuck one ends when its read returns, if ever: it is a daemon thread)."""
        if self._inbox is not None:
            self._inbox.put(None)
        self._worker = self._inbox = None
