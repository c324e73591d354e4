"""Overload is never silent: when writes fall behind, the store keeps every k-th snapshot of each host,
counts what it sheds, marks each host's gap with an event and raises the collector_overloaded alert."""

from __future__ import annotations

import asyncio

import pytest
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import shedding
from gpufleet.collector.store.shedding import Shedder, keep_one_in
from gpufleet.collector.store.store import Store, Tuning

from tests.builders import snap
from tests.builders import store_gpu as gpu


def test_ladder_and_even_shedding_per_host() -> None:
    assert [keep_one_in(f) for f in (0.0, 0.49, 0.5, 0.75, 0.9, 1.5)] == [1, 1, 2, 4, 8, 8]
    changes: list[tuple[bool, str | None]] = []
    s = Shedder(clock=lambda: 100.0, on_change=lambda a, m: changes.append((a, m)))
    kept = {h: [i for i in range(40) if s.admit(h, 0.8, float(i))] for h in ("a", "b")}  # one in 4
    assert kept["a"] == kept["b"] == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]  # evenly, per host
    assert s.total == 60 and s.by_host == {"a": 30, "b": 30}
    assert changes and changes[0][0] is True and "1 of every 4" in (changes[0][1] or "")
    assert s.admit("a", 0.1, 41.0) and s.keep_one_in == 1  # drained: every snapshot again


async def test_burst_sheds_evenly_marks_gaps_and_recovers(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shedding, "QUIET", 0.2)
    cfg = StorageConfig(path=str(tmp_path / "s.db"), batch_max_delay=0.02)
    store = await Store.open(cfg, tuning=Tuning(queue_max=400))
    changes: list[bool] = []
    store.on_overload_change = lambda active, _msg: changes.append(active)
    try:
        hosts = [f"h{i}" for i in range(8)]
        for k in range(40):  # 320 snapshots in one go: the writer gets no turn, the queue fills
            for h in hosts:
                store.submit_snapshot(h, snap(gpu(0), ts=1000.0 + k), 1000.0 + k)
        assert store.shed > 0 and store.keep_one_in > 1 and changes == [True]
        per_host = store.shed_by_host
        assert set(per_host) == set(hosts) and max(per_host.values()) - min(per_host.values()) <= 1
        assert store.dropped == 0  # shedding kept the queue under its bound
        await store.flush()
        await asyncio.sleep(1.1)  # quiet for longer than QUIET, and past the writer's once-a-second look
        store.submit_snapshot("h0", snap(gpu(0), ts=2000.0), 2000.0)  # caught up: stored, episode ends
        await store.flush()
        assert changes == [True, False] and store.keep_one_in == 1
        events = await store.events(since=0.0, until=3000.0)
        marks = [e for e in events if e.kind == shedding.EVENT_KIND]
        assert sorted(e.host for e in marks) == hosts
        assert all("snapshots not stored" in e.message for e in marks)
        stored = await store.gpu_history("h3", gpu=0, since=999.0, until=1040.0)
        assert len(stored[0].points) == 40 - per_host["h3"]  # what was not shed is all there
    finally:
        await store.close()
