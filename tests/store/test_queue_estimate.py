"""The writer's queue bounds memory by its estimate of what the queued snapshots hold (``queue_max_bytes``):
the estimate must cover what they really hold, facts included, or the bound lets memory run past it."""

from __future__ import annotations

import gc
import tracemalloc

from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.store.store import Store, Tuning
from gpufleet.collector.transport import wirefast


async def test_the_queue_counts_what_its_snapshots_and_their_facts_hold(tmp_path) -> None:
    store = await Store.open(StorageConfig(path=str(tmp_path / "q.db"), batch_max_delay=5.0),
                             tuning=Tuning(queue_max=10_000))
    store.facts = FleetFacts(DEFAULT_THRESHOLDS)  # as the daemon sets it: the rules' facts ride along
    lines = [FrameGenerator(f"h{i % 10}", 8, procs=8).snapshot(1 + i // 10) for i in range(200)]
    try:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i, line in enumerate(lines):  # decoded as the transport does; the writer gets no turn
            frame = wirefast.decode(line)
            store.submit_snapshot(f"h{i % 10}", frame, 1000.0 + i)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert store.queue_depth == 200
        ratio = store.queue_bytes / held
        assert 0.85 <= ratio <= 2.0, f"the queue reckons {store.queue_bytes:,} bytes; it holds {held:,}"
    finally:
        await store.close()
