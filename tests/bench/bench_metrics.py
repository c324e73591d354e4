"""Cost of one /metrics scrape for a large fleet (run by hand: python tests/bench/bench_metrics.py [hosts]).

Prints the part that runs on the event loop (collect: reading the live view) and the part that runs in a
thread (formatting), for the text format and OpenMetrics.
"""

from __future__ import annotations

import sys
import time

from gpufleet.agent import wire
from gpufleet.collector.live import HostState, LiveView
from gpufleet.collector.metrics import MetricsServer
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

GIB = 1 << 30


class Source:
    def __init__(self, hosts: int, gpus: int = 8, procs: int = 4) -> None:
        self.live = LiveView()
        for h in range(hosts):
            samples = [wire.GpuSample(
                index=i, uuid=f"GPU-{h}-{i}", name="NVIDIA H100", util_gpu=50, util_mem=20,
                memory_total=80 * GIB, memory_used=40 * GIB, temperature=60, temp_slowdown=87,
                temp_shutdown=92, power_draw=300.0, power_limit=700.0, clock_sm=1900, clock_mem=2600,
                ecc_corrected=0, ecc_uncorrected=0, mig_mode=False,
                processes=[wire.ProcessSample(pid=p, user=f"u{p % 7}", gpu_memory=GIB) for p in range(procs)])
                for i in range(gpus)]
            snap = wire.Snapshot(ts=1.0, seq=1, gpus=samples)
            self.live.hosts[f"h{h}"] = HostState(name=f"h{h}", status="up", agent_version="0.1", lag=0.1,
                                                 last_seen=1.0, snapshot=snap)

    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        return {("wasted", "warning", "firing"): 3}

    def flags(self, host: str, gpu: int) -> set[str]:
        return {"wasted"} if gpu == 0 else set()

    def stats(self) -> dict[str, float]:
        return {"frames_total": 1.0, "store_queue_depth": 0.0}


def main() -> None:
    for hosts in [int(a) for a in sys.argv[1:]] or [100, 500]:
        srv = MetricsServer(Source(hosts), "127.0.0.1:0")
        t = time.perf_counter()
        srv.collector.collect()
        loop_ms = (time.perf_counter() - t) * 1000
        for label, enc in (("text", generate_latest), ("openmetrics", generate_openmetrics)):
            t = time.perf_counter()
            body = enc(srv.registry)
            lines = body.count(b"\n")
            total_ms = (time.perf_counter() - t) * 1000
            print(f"{hosts} hosts x 8 GPUs ({hosts * 8} GPUs), {label}: on-loop collect {loop_ms:.0f} ms, "
                  f"whole scrape {total_ms:.0f} ms, {len(body) / 1e6:.1f} MB, {lines} lines")


if __name__ == "__main__":
    main()
