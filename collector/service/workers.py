"""One collector on several cores: ``workers: N`` runs N worker processes, each a shard of the fleet.

Why: one Python interpreter does a host's transport, decode, rules and store on one core, about 3 ms of CPU
per host-sample with 8 GPUs x 8 processes here (issue 13), so one process holds a few hundred hosts at 1 Hz
and no more, however many cores the machine has. Worker I of N is shard I/N (collector/shards.py) of the one
config: it reads its own hosts end to end, with its own database, query socket and metrics port, so nothing
crosses a process boundary per sample (no frame is forwarded) and the CLI merges the workers as it merges
shards. :func:`~gpufleet.collector.config.split.worker_config` is the one place that derives a worker's paths
and port from the config; the CLI reads :func:`~gpufleet.collector.config.split.worker_addresses`, so it asks
every worker without a ``collectors:`` list.

:class:`Supervisor` is what ``gpufleet collector run`` becomes with N > 1: it starts the workers, restarts
one that exits (after a backoff, so a worker failing at start does not spin), and on SIGTERM stops them all
and waits for each to close its store. A worker dies with its supervisor (PR_SET_PDEATHSIG), so a
``kill -9`` of the supervisor leaves no worker holding a database.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Final

log = logging.getLogger(__name__)

#: Seconds before a worker that exited is started again: doubling from the first to the last, back to the
#: first once it has run STEADY seconds.
BACKOFF_FIRST: Final = 1.0
BACKOFF_MAX: Final = 30.0
STEADY: Final = 60.0
#: How long a worker may take to stop on SIGTERM (its store closes within 35 s) before it is killed.
STOP_TIMEOUT: Final = 40.0
_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """In the worker before exec: SIGTERM when the supervisor dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


@dataclasses.dataclass(slots=True)
class _Worker:
    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    backoff: float = BACKOFF_FIRST


class Supervisor:
    """Runs ``command(i)`` for workers 1..N until :meth:`stop`; restarts one that exits meanwhile."""

    def __init__(self, count: int, command: Callable[[int], Sequence[str]], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = [_Worker(i) for i in range(1, count + 1)]
        self.command = command
        self.clock = clock
        self._stopping = asyncio.Event()

    async def run(self) -> int:
        """Until SIGTERM/SIGINT (or :meth:`stop`): 0 when every worker stopped cleanly, else 1."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        try:
            results = await asyncio.gather(*(self._keep(w) for w in self.workers))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return 0 if all(rc == 0 for rc in results) else 1

    def stop(self) -> None:
        self._stopping.set()

    async def _keep(self, w: _Worker) -> int | None:
        """Keep worker ``w`` running; returns its exit status once stopped."""
        while True:
            w.started = self.clock()
            w.proc = await asyncio.create_subprocess_exec(*self.command(w.index), preexec_fn=_die_with_parent)
            stopping = asyncio.ensure_future(self._stopping.wait())
            exited = asyncio.ensure_future(w.proc.wait())
            await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
            if self._stopping.is_set():
                exited.cancel()
                return await self._stop_one(w)
            stopping.cancel()
            ran = self.clock() - w.started
            if ran >= STEADY:
                w.backoff = BACKOFF_FIRST
            log.error("worker %d (pid %d) exited with status %s after %.0f s; starting it again in %.0f s",
                      w.index, w.proc.pid, w.proc.returncode, ran, w.backoff)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), w.backoff)
            w.backoff = min(BACKOFF_MAX, 2 * w.backoff)
            if self._stopping.is_set():
                return 0  # stopped while waiting to restart: nothing is running

    async def _stop_one(self, w: _Worker) -> int | None:
        proc = w.proc
        assert proc is not None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except asyncio.TimeoutError:
                log.error("worker %d (pid %d) did not stop within %.0f s: killed", w.index, proc.pid,
                          STOP_TIMEOUT)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return proc.returncode
