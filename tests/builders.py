"""The one test kit's builders: GPU, lost GPU, process, snapshot, hello and alert records, the hand-moved
clock, free_port and an event loop in a thread. Every test directory and bench builds its samples here
(``from tests.builders import gpu, proc, snap``), so a default (how much memory a GPU with no process uses,
which model it is) has one owner.

Directory presets are declared as data (``STORE_GPU``, ``STORE_PROC``) over the same builders, not as
builders of their own.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import sqlite3
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord, AlertState

if TYPE_CHECKING:
    from gpufleet.collector.store.store import Store

#: what the builders build: the collector's Structs (``sample``), or ``wire`` for the agent's own dataclasses
Model = Any

GIB = 1 << 30
MIB = 1 << 20
#: what the driver keeps on a GPU with no process on it (the memory an idle card shows in nvidia-smi)
DRIVER_RESERVED = 64 * MIB


def proc(pid: int = 4242, user: str | None = "alice", *, mem_gib: float | None = 40.0, mem: int | None = None,
         sm: int | None = None, start: float | None = None, command: str | None = "jupyter-lab",
         model: Model = sample, **kw: Any) -> Any:
    """A GPU process; ``mem`` (bytes) wins over ``mem_gib``; ``mem_gib=None`` is a process whose memory
    NVML could not read. ``model=wire`` builds the agent's dataclass (every builder takes it)."""
    memory = mem if mem is not None else (None if mem_gib is None else int(mem_gib * GIB))
    kw.setdefault("gpu_memory", memory)  # the field's own name wins over the short one
    kw.setdefault("sm_util", sm)
    kw.setdefault("start_time", start)
    return model.ProcessSample(pid=pid, user=user, command=command, **kw)


def gpu(index: int = 0, *, util: int | None = 2, procs: list[Any] | None = None,
        mem: int | None = None, mem_used_gib: float | None = None, uuid: str | None = None,
        host: str | None = None, name: str | None = "A100", memory_total: int = 80 * GIB,
        temp: int | None = None, power: float | None = None, model: Model = sample, **kw: Any) -> Any:
    """One GPU sample. Memory used is ``mem`` bytes, else ``mem_used_gib``, else its processes' memory
    plus what the driver reserves. The UUID names the host when one is given (two hosts, two GPUs)."""
    procs = procs or []
    if mem is not None:
        used: int = mem
    elif mem_used_gib is not None:
        used = int(mem_used_gib * GIB)
    else:
        used = sum(p.gpu_memory or 0 for p in procs) + DRIVER_RESERVED
    ident = uuid or (f"GPU-{host}-{index}" if host else f"GPU-{index:04d}")
    kw.setdefault("temperature", temp)  # the field's own name wins over the short one
    kw.setdefault("power_draw", power)
    return model.GpuSample(index=index, uuid=ident, name=name, util_gpu=util, memory_used=used,
                          memory_total=memory_total, processes=procs, **kw)


def lost_gpu(index: int = 0, *, uuid: str | None = None, host: str | None = None,
             error: str = "GPU is lost", model: Model = sample) -> Any:
    """A GPU that could not be read: its error and nothing else (the agent sends no reading for it)."""
    ident = uuid or (f"GPU-{host}-{index}" if host else f"GPU-{index:04d}")
    return model.GpuSample(index=index, uuid=ident, error=error)


def snap(*gpus: Any, ts: float = 0.0, seq: int | None = None, model: Model = sample) -> Any:
    return model.Snapshot(ts=ts, seq=int(ts) if seq is None else seq, gpus=list(gpus),
                          proto=wire.PROTO_VERSION)


def heartbeat(ts: float = 0.0, seq: int = 0) -> sample.Heartbeat:
    return sample.Heartbeat(ts=ts, seq=seq, proto=wire.PROTO_VERSION)


def alert(rule: str, host: str = "n1", gpu: int | None = None, *, state: AlertState = "firing",
          severity: str = "warning", started: float = 0.0, **labels: str) -> AlertRecord:
    """An alert record as the engine keeps it: labels host, gpu (when given), rule and ``labels``."""
    lab = {"host": host, **({"gpu": str(gpu)} if gpu is not None else {}), **labels, "rule": rule}
    return AlertRecord(fingerprint=f"{rule}/{host}/{gpu}/{sorted(labels.items())}", rule=rule,
                       severity=severity, state=state, labels=lab, started_at=started,
                       fired_at=started if state == "firing" else None, updated_at=started)


def hello(gpus: list[wire.GpuInfo] | None = None, ts: float = 1000.0) -> wire.Hello:
    return wire.Hello(agent_version="0.1.0", hostname="reported-name", ts=ts, driver_version="550.54",
                      nvml_version="12.550", cuda_version=12040, backend="fake", gpus=gpus or [])


#: the store tests' GPU: an H100 at work, every reading present (rollups average them)
STORE_GPU: dict[str, Any] = {"util": 50, "mem": 2 * GIB, "temp": 60, "power": 150.0, "name": "NVIDIA H100",
                             "power_limit": 700.0}
#: the store tests' process: 1 GiB at 50 % SM, started at t=1000
STORE_PROC: dict[str, Any] = {"mem": GIB, "sm": 50, "start": 1000.0, "command": "python train.py"}
store_gpu = functools.partial(gpu, **STORE_GPU)
store_proc = functools.partial(proc, **STORE_PROC)


class FakeClock:
    """A clock tests move by hand, so timelines are deterministic. ``t`` and ``now`` are the same time."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    @property
    def now(self) -> float:
        return self.t

    @now.setter
    def now(self, value: float) -> None:
        self.t = value

    def advance(self, seconds: float) -> None:
        self.t += seconds


def scenario_frames(samples: int = 12, step: float = 5.0) -> Iterator[wire.Frame]:
    """Every bundled fake scenario's frames as the real sampler makes them (hello, then ``samples``
    snapshots ``step`` s apart with their events): the corpus the wire's encoder and decoders are
    checked on."""
    from gpufleet.agent import scenarios
    from gpufleet.agent.fake import FakeNvml, FakeProcs, load_scenario
    from gpufleet.agent.nvml import Gateway
    from gpufleet.agent.sampler import Sampler

    for name in scenarios.names():
        clock = FakeClock(1000.0)
        sc = load_scenario(name)
        lib = FakeNvml(sc, clock=clock, sleep=lambda s: None)
        sampler = Sampler(Gateway(lib, backend="fake"), FakeProcs(lib), clock=clock)
        sampler.open()
        yield sampler.hello(sc.hostname, "0")
        for _ in range(samples):
            frame, events = sampler.sample()
            yield frame
            yield from events
            clock.advance(step)


def old_schema_file(path: Path, version: int) -> sqlite3.Connection:
    """A history file exactly as the gpufleet of schema ``version`` left it (its migrations only), open for
    the test to put data in (close it before the store opens the file)."""
    from gpufleet.collector.store import schema

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for v in range(version):
        for step in schema.MIGRATIONS[v]:
            if isinstance(step, str):
                conn.execute(step)
            else:  # a conversion (v8: raw samples into chunks)
                step(conn)
    conn.execute(f"PRAGMA user_version={version}")
    return conn


def cap_store_pages(store: Store, pages: int | None) -> int:
    """Cap the store's file at ``pages`` (None: the pages it has now) so the next writes hit SQLITE_FULL: a
    disk filling up, on the writing connection only (PRAGMA max_page_count is per connection).

    Called from the test's thread on purpose: while writes fail, a job queued to the writer would wait
    behind the frames being retried. sqlite3 connections are serialized, so this is safe."""
    assert store._writer_conn is not None
    raw = store._writer_conn._conn
    if pages is None:
        # no free pages left inside the file either: chunks are small, and the head's parts free pages
        # as they go, so the next writes could otherwise fit for a long while
        raw.executescript("PRAGMA incremental_vacuum")
        pages = int(raw.execute("PRAGMA page_count").fetchone()[0])
    return int(raw.execute(f"PRAGMA max_page_count={pages}").fetchone()[0])


def free_port() -> int:
    """A TCP port free on loopback now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopThread:
    """An event loop in a thread: a server keeps serving while the test or bench blocks (a browser, a
    subprocess)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def overwrite_pages(db: Path, page_size: int = 4096) -> int:
    """Overwrite every page of an SQLite file but the first (its header and schema) with garbage, as a bad
    disk or a botched restore would; returns how many. Pages a later commit puts in the WAL read fine."""
    pages = os.path.getsize(db) // page_size
    fd = os.open(db, os.O_WRONLY)
    try:
        for n in range(1, pages):
            os.pwrite(fd, bytes([(n * 37 + i) % 251 for i in range(64)]) * (page_size // 64), n * page_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    return pages - 1


def stored_samples(path: Path | str) -> list[tuple[Any, ...]]:
    """Every raw sample a history file holds (chunks and head parts), as the old ``samples`` table's rows:
    (gpu_id, ts, util, util_mem, mem_used, temp, power, clock_sm, clock_mem, fan, ecc_corrected,
    ecc_uncorrected, throttle, error), sorted by (gpu_id, ts)."""
    from gpufleet.collector.store import raw

    conn = sqlite3.connect(path)
    try:
        return raw.all_rows(conn)
    finally:
        conn.close()
