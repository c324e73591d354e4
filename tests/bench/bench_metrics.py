"""Cost of one /metrics scrape for a large fleet (run by hand: python -m tests.bench.bench_metrics [hosts]).

Prints the part that runs on the event loop (freeze: copying the live view, rule flags, alert counts and
stats) and the part that runs in a thread (building the samples and writing the text), for the text format
and OpenMetrics, beside prometheus_client's own encoder over the same families (the baseline); then a real
HTTP scrape. The source keeps one firing alert per GPU 0 (like the daemon's alert engine, whose per-GPU
``flags()`` scans every active alert), once with the bulk ``gpu_flags()`` and once without it.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.faces.metrics.exporter import FleetCollector, MetricsServer
from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.model import sample
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

GIB = 1 << 30


class Source:
    def __init__(self, hosts: int, gpus: int = 8, procs: int = 4) -> None:
        self.live = LiveView()
        for h in range(hosts):
            samples = [sample.GpuSample(
                index=i, uuid=f"GPU-{h}-{i}", name="NVIDIA H100", util_gpu=50, util_mem=20,
                memory_total=80 * GIB, memory_used=40 * GIB, temperature=60, temp_slowdown=87,
                temp_shutdown=92, power_draw=300.0, power_limit=700.0, clock_sm=1900, clock_mem=2600,
                ecc_corrected=0, ecc_uncorrected=0, mig_mode=False,
                processes=[sample.ProcessSample(pid=p, user=f"u{p % 7}", gpu_memory=GIB)
                           for p in range(procs)])
                for i in range(gpus)]
            snap = sample.Snapshot(proto=wire.PROTO_VERSION, ts=1.0, seq=1, gpus=samples)
            self.live.hosts[f"h{h}"] = HostState(name=f"h{h}", status="up", agent_version="0.1", lag=0.1,
                                                 last_seen=1.0, snapshot=snap)
        # one firing "wasted" alert on GPU 0 of every host, as (rule, labels) like the alert engine keeps
        self.alerts = [("wasted", {"host": f"h{h}", "gpu": "0"}) for h in range(hosts)]

    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        return {("wasted", "warning", "firing"): len(self.alerts)}

    def flags(self, host: str, gpu: int) -> set[str]:
        want = str(gpu)  # the alert engine's flags(): a scan over every active alert
        return {r for r, lab in self.alerts if lab.get("host") == host and lab.get("gpu") == want}

    def stats(self) -> dict[str, float]:
        return {"frames_total": 1.0, "store_queue_depth": 0.0}


class BulkSource(Source):
    def gpu_flags(self) -> dict[tuple[str, int], set[str]]:
        out: dict[tuple[str, int], set[str]] = {}
        for rule, lab in self.alerts:
            out.setdefault((lab["host"], int(lab["gpu"])), set()).add(rule)
        return out


def _scrape(url: str) -> None:
    """One scrape from another process, as Prometheus makes it (curl, or urllib in this one without it),
    asking for OpenMetrics as Prometheus does, and gzip."""
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    if shutil.which("curl"):
        subprocess.run(["curl", "-sf", "-o", "/dev/null", "--compressed", "-H", f"Accept: {accept}", url],
                       check=True, timeout=60)
        return
    req = urllib.request.Request(url, headers={"Accept": accept})
    urllib.request.urlopen(req, timeout=60).read()  # noqa: S310


def _ms(t: float) -> float:
    return (time.perf_counter() - t) * 1000


async def _stall(src: Any) -> tuple[float, list[float]]:
    """Real HTTP scrapes: four in a row (the first with nothing cached; Prometheus keeps scraping), timed,
    then one more while a task ticks the event loop every 1 ms, for the longest gap between its ticks
    (the ticking itself slows that scrape, so it is not among the timed ones)."""
    async with MetricsServer(src, "127.0.0.1:0") as srv:
        scrapes = []
        for _ in range(4):
            t = time.perf_counter()
            await asyncio.to_thread(_scrape, srv.url)
            scrapes.append(_ms(t))
        loop = asyncio.get_running_loop()
        worst = 0.0
        done = False

        async def tick() -> None:
            nonlocal worst
            last = loop.time()
            while not done:
                await asyncio.sleep(0.001)
                now = loop.time()
                worst, last = max(worst, now - last), now

        ticker = asyncio.create_task(tick())
        await asyncio.to_thread(_scrape, srv.url)
        done = True
        await ticker
        return worst * 1000, scrapes


SCRAPE_TARGET_MS = 500.0  # /metrics at 1,000 hosts (issue 13)


def main() -> int:
    missed: list[str] = []
    for hosts in [int(a) for a in sys.argv[1:]] or [100, 1000]:
        for kind in (BulkSource, Source):
            src: Any = kind(hosts)
            srv = MetricsServer(src, "127.0.0.1:0")
            coll: FleetCollector = srv.collector
            t = time.perf_counter()
            view = coll.freeze()
            loop_ms = _ms(t)
            flags = "bulk gpu_flags()" if kind is BulkSource else "flags() per GPU"
            for label, enc in (("text", generate_latest), ("openmetrics", generate_openmetrics)):
                t = time.perf_counter()
                scrape = coll.build(view)
                build_ms = _ms(t)
                t = time.perf_counter()
                body = scrape.render(openmetrics=label == "openmetrics")
                render_ms = _ms(t)
                t = time.perf_counter()
                ref = enc(srv.registry)  # baseline: prometheus_client (collects again: freeze + build)
                ref_ms = _ms(t)
                lines = body.count(b"\n")
                print(f"{hosts} hosts x 8 GPUs ({hosts * 8} GPUs), {flags}, {label}: on-loop freeze "
                      f"{loop_ms:.0f} ms; in thread: build {build_ms:.0f} ms + text {render_ms:.0f} ms "
                      f"(prometheus_client's encoder beside it: {ref_ms:.0f} ms); "
                      f"{len(body) / 1e6:.1f} MB ({len(ref) / 1e6:.1f}), {lines} lines")
            stall, scrapes = asyncio.run(_stall(src))
            scrape = statistics.median(scrapes[1:])
            print(f"  HTTP scrape {scrape:.0f} ms (median of the next three; the first {scrapes[0]:.0f} ms); "
                  f"longest event-loop stall meanwhile {stall:.0f} ms")
            if kind is BulkSource and hosts <= 1000 and scrape > SCRAPE_TARGET_MS:
                missed.append(f"{hosts} hosts: HTTP scrape {scrape:.0f} ms (target {SCRAPE_TARGET_MS:.0f})")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
