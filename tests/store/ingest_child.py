"""Child process for the kill -9 test: ingests 8-GPU snapshots and prints the last seq of every commit.

Usage: python ingest_child.py DB_PATH FIRST_SEQ. Prints "<seq>" after each flush returns: every snapshot
with a seq <= that number is committed. Runs until killed.
"""

from __future__ import annotations

import asyncio
import sys

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store


def snapshot(seq: int) -> sample.Snapshot:
    procs = [sample.ProcessSample(pid=100 + seq % 3, user="alice", gpu_memory=1 << 30, sm_util=seq % 100,
                                start_time=10.0)]
    return sample.Snapshot(proto=wire.PROTO_VERSION, ts=1000.0 + seq, seq=seq, gpus=[
        sample.GpuSample(index=i, uuid=f"GPU-{i}", util_gpu=seq % 100, memory_used=i << 30, temperature=50,
                       power_draw=100.5, processes=procs) for i in range(8)])


async def main(path: str, seq: int) -> None:
    store = await Store.open(StorageConfig(path=path, batch_max_delay=0.005))
    while True:
        for _ in range(7):
            store.submit_snapshot("h1", snapshot(seq), 0.0)
            store.submit_event("h1", wire.Event(ts=1000.0 + seq, kind="xid", xid=seq % 200), 0.0)
            seq += 1
        await store.flush()
        print(seq - 1, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
