"""Running totals (process spans, GPU-hours per user and per Slurm job) are written every
``Tuning.accrue_interval`` seconds, on an awaited flush and on a clean stop; never counted twice, whatever the
interval."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store, Tuning

from tests.builders import cap_store_pages, proc, snap
from tests.builders import store_gpu as gpu

Rows = list[tuple[object, ...]]


def _totals(path: Path) -> tuple[Rows, Rows, Rows]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        spans = con.execute("SELECT pid, first_seen, last_seen, sm_sum, sm_count, max_gpu_memory "
                            "FROM processes ORDER BY pid").fetchall()
        usage = con.execute("SELECT user, round(held, 6), round(used, 6) FROM usage ORDER BY user").fetchall()
        jobs = con.execute("SELECT job, round(held, 6), round(used, 6) FROM slurm_usage "
                           "ORDER BY job").fetchall()
    finally:
        con.close()
    return spans, usage, jobs


async def _committed(store: Store, n: int) -> None:
    """Until the writer has made ``n`` commits in all (without a flush: that would write the totals)."""
    for _ in range(500):
        if store._writer is not None and store._writer.commits >= n and store.queue_depth == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no commit {n}")


def _sample(i: int, gpus: int = 1, bulky: int = 0) -> tuple[str, object, float]:
    """Alice's Slurm job 700 and bob's process (neither with a start time), and with ``gpus`` > 1 carol's
    process (with one) on each further GPU. ``bulky`` more GPUs, without processes, whose error text differs
    every second (random, so it does not compress): samples that need new pages in every batch."""
    procs = [proc(7, "alice", mem_gib=1 + i % 3, sm=10 * (i % 5), job="700"), proc(8, "bob", mem_gib=2, sm=3)]
    more = [gpu(k, util=k, procs=[proc(20 + k, "carol", mem_gib=k, sm=i % 7, start=50.0, command="x" * 200)])
            for k in range(1, gpus)]
    noise = random.Random(i)
    more += [gpu(gpus + k, util=None, error=noise.randbytes(600).hex()) for k in range(bulky)]
    return "h1", snap(gpu(0, util=40 + i, procs=procs), *more, ts=100.0 + i), 0.0


async def test_totals_wait_for_the_interval_a_flush_or_a_clean_stop(config: StorageConfig) -> None:
    path = config.resolved_path()
    s = await Store.open(config, tuning=Tuning(accrue_interval=3600.0))
    for i in range(3):
        s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
    await _committed(s, 1)  # the first batch after start writes them
    first = _totals(path)
    assert [row[0] for row in first[0]] == [7, 8] and first[0][0][2] == 102.0
    for i in range(3, 6):
        s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
    await _committed(s, 2)
    assert _totals(path) == first, "held back: the interval has not passed"
    await s.flush()
    flushed = _totals(path)
    assert flushed[0][0][2] == 105.0 and flushed != first
    for i in range(6, 9):
        s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
    await _committed(s, 4)
    assert _totals(path) == flushed
    await s.close()  # a clean stop writes what was held
    assert _totals(path)[0][0][2] == 108.0


async def test_the_same_totals_whatever_the_interval(tmp_path: Path) -> None:
    results = []
    for interval in (0.0, 3600.0):
        config = StorageConfig(path=str(tmp_path / f"{interval}.db"), batch_max_delay=0.0)
        s = await Store.open(config, tuning=Tuning(accrue_interval=interval))
        for i in range(40):
            s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
            if i % 7 == 0:
                await asyncio.sleep(0.02)  # several batches
        await s.close()
        assert s._writer is not None and s._writer.commits > 3
        results.append(_totals(config.resolved_path()))
    assert results[0] == results[1]
    spans, usage, jobs = results[0]
    assert spans[0][:5] == (7, 100.0, 139.0, float(sum(10 * (i % 5) for i in range(40))), 40)
    assert usage[0][0] == "alice" and usage[0][1] == 39.0
    assert jobs == [("700", usage[0][1], usage[0][2])]  # alice's only process is Slurm job 700


async def test_reads_through_the_store_see_the_held_totals(config: StorageConfig) -> None:
    s = await Store.open(config, tuning=Tuning(accrue_interval=3600.0))
    try:
        for i in range(3):
            s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
        await _committed(s, 1)
        for i in range(3, 6):
            s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
        await _committed(s, 2)
        assert _totals(s.path)[0][0][2] == 102.0  # the file: held back
        spans = await s.process_history("h1", since=0, until=1e10)
        usage = await s.usage_by_user(since=0, until=1e10)
    finally:
        await s.close()
    assert max(sp.last_seen for sp in spans if sp.pid == 7) == 105.0
    assert {u.user: round(u.gpu_hours_held * 3600) for u in usage} == {"alice": 5, "bob": 5}


async def test_a_batch_written_again_after_a_failed_write_adds_nothing_twice(tmp_path: Path) -> None:
    """The disk fills while the totals are held: the batch is rolled back and written again every
    retry_interval until space returns. Spans and GPU-hours then equal those of a store that never failed."""
    results = []
    for fail in (False, True):
        config = StorageConfig(path=str(tmp_path / f"{fail}.db"), batch_max_delay=0.0)
        s = await Store.open(config, tuning=Tuning(accrue_interval=3600.0, retry_interval=0.02,
                                                   head_interval=0.0))
        for i in range(5):
            s.submit_snapshot(*_sample(i, gpus=8))  # type: ignore[arg-type]
        await s.flush()
        if fail:
            cap_store_pages(s, None)
        for i in range(5, 60):  # each batch's samples take new pages: a capped file is full at once
            s.submit_snapshot(*_sample(i, gpus=8, bulky=8))  # type: ignore[arg-type]
            await asyncio.sleep(0)
        if fail:
            for _ in range(500):
                if not s.healthy:
                    break
                await asyncio.sleep(0.01)
            assert not s.healthy and s.queue_depth > 0
            await asyncio.sleep(0.3)  # about fifteen more tries, each rolled back
            assert not s.healthy
            cap_store_pages(s, 1 << 30)
        await s.close()
        assert s.dropped == 0 and s.shed == 0
        results.append(_totals(config.resolved_path()))
    assert results[1] == results[0]
    spans, usage, jobs = results[0]
    assert [sp[4] for sp in spans] == [60] * 9  # every sample of each of the 9 processes, counted once
    assert usage[0][0] == "alice" and usage[0][1] == 59.0


async def test_a_frame_that_cannot_be_written_costs_only_itself(tmp_path: Path) -> None:
    """A batch that fails for a reason that will not pass (here a GPU without a UUID: a NOT NULL column) is
    written frame by frame: the bad frame is dropped, the others' spans and GPU-hours count exactly once,
    those added before the failure as well as those after it."""
    config = StorageConfig(path=str(tmp_path / "g.db"), batch_max_delay=0.5)
    s = await Store.open(config, tuning=Tuning(accrue_interval=3600.0))
    try:
        for i in range(3):
            s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
        host, bad, _ = _sample(3)
        bad.gpus[0].uuid = None  # type: ignore[attr-defined]
        s.submit_snapshot(host, bad, 0.0)  # type: ignore[arg-type]
        for i in range(4, 7):
            s.submit_snapshot(*_sample(i))  # type: ignore[arg-type]
        await s.flush()
        assert s.rejected == 1 and s._writer is not None and s._writer.commits >= 1
    finally:
        await s.close()
    spans, usage, _ = _totals(config.resolved_path())
    assert [(sp[0], sp[4]) for sp in spans] == [(7, 6), (8, 6)]  # six samples each, none twice
    # held: 1 s for each of 101, 102, 105, 106 and 2 s at 104 (the dropped 103's second goes to the next
    # sample, as for any gap); used: those seconds x util (40 + i) %
    used = round((41 + 42 + 2 * 44 + 45 + 46) / 100, 6)
    assert usage == [("alice", 6.0, used), ("bob", 6.0, used)]
