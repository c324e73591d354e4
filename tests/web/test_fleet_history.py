"""The page's history over a real history file (issue 36, item 7): an hour of a GPU is every raw sample (the
1-minute means flattened an input-bound sawtooth into a stub), and the front page's fleet chart counts the
GPUs busy, wasted, idle and lost over time, each GPU in one state, as the fleet line does."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from gpufleet.collector.faces.web.fleetchart import fleet_states
from gpufleet.collector.faces.web.server import WebServer
from gpufleet.collector.model.records import AlertRecord, GpuSeries, SeriesPoint
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.settings import StorageConfig, WebConfig
from gpufleet.collector.store.store import Store

from tests.builders import GIB, gpu, lost_gpu, proc, snap
from tests.web.web_testkit import Source


async def _get(port: int, path: str) -> tuple[int, Any]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await w.drain()
    raw = await asyncio.wait_for(r.read(), 30)
    w.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_an_hour_is_every_raw_sample_and_the_fleet_chart_counts_states(tmp_path: Path) -> None:
    now = time.time()
    store = await Store.open(StorageConfig(path=str(tmp_path / "h.db")))
    try:
        # h0: GPU 0 alice, sawing 90 % / 10 % every 5 s for 20 minutes; GPU 1 free; h1: GPU 0 lost
        for k in range(1200):
            t = now - 1200 + k
            saw = gpu(0, uuid="GPU-h0-0", util=90 if k // 5 % 2 else 10, mem=30 * GIB,
                      procs=[proc(7, "alice", mem=30 * GIB, command="python train.py")])
            free = gpu(1, uuid="GPU-h0-1", util=0, mem=0)
            store.submit_snapshot("h0", snap(saw, free, ts=t, seq=k), t)
            lost = lost_gpu(0, uuid="GPU-h1-0", error="GPU lost: NVML_ERROR_GPU_IS_LOST")
            store.submit_snapshot("h1", snap(lost, ts=t, seq=k), t)
        await store.flush()
        src = Source(hosts=2)
        src.store = store  # type: ignore[assignment]  # the real store behind the stand-in's live view
        # alice's GPU went wasted 5 minutes ago (the wasted rule fired), and is still
        src.alerts.records = [AlertRecord(fingerprint="w", rule="wasted", severity="warning", state="firing",
                                          labels={"host": "h0", "gpu": "0", "user": "alice"},
                                          started_at=now - 400, fired_at=now - 300)]
        async with WebServer(src, WebConfig(enabled=True, listen="127.0.0.1:0")) as srv:
            status, hist = await _get(srv.port, "/api/history?host=h0&gpu=0&range=1h")
            assert status == 200 and hist["series"]["resolution"] == "raw", hist["series"]
            points = hist["series"]["points"]
            assert len(points) >= 1190 and {p[1] for p in points} == {10, 90}  # the sawtooth, whole
            status, fleet = await _get(srv.port, "/api/fleet?range=1h")
    finally:
        await store.close()
    assert status == 200 and fleet["range"] == "1h" and len(fleet["ts"]) <= 120
    states = ("busy", "wasted", "idle", "lost")
    seen = [k for k, _ in enumerate(fleet["ts"]) if sum(fleet[s][k] for s in states)]
    assert seen, fleet
    last = seen[-2]  # a whole bucket (the newest may hold a moment only)
    assert {s: fleet[s][last] for s in states} == {
        "busy": 0, "wasted": 1, "idle": 1, "lost": 1}  # each GPU once: alice's is wasted, not busy too
    early = seen[0]
    assert (fleet["busy"][early], fleet["wasted"][early]) == (1, 0)  # before the alert fired: busy


def test_fleet_states_count_each_gpu_once_per_point() -> None:
    def series(host: str, index: int, values: list[tuple[float | None, float | None]]) -> GpuSeries:
        pts = [SeriesPoint(ts=60.0 * k, util_mean=u, util_max=u, mem_used_mean=m, mem_used_max=m,
                           temp_max=None, power_mean=None) for k, (u, m) in enumerate(values)]
        return GpuSeries(host=host, index=index, uuid=f"{host}-{index}", name=None, resolution="1m",
                         memory_total=80 * GIB, points=pts, step=60.0)

    held = 30.0 * GIB
    gpus = [series("n1", 0, [(80, held), (0, held), (0, held)]),  # busy, then idle-held (wasted once firing)
            series("n1", 1, [(0, 0.0), (0, 0.0), (0, 0.0)]),  # free
            series("n2", 0, [(None, None), (50, held), (None, None)])]  # lost, back, lost again
    fired = AlertRecord(fingerprint="a", rule="wasted", severity="warning", state="resolved",
                        labels={"host": "n1", "gpu": "0"}, started_at=60.0, fired_at=130.0, resolved_at=170.0)
    info = AlertRecord(fingerprint="b", rule="idle", severity="info", state="firing",
                       labels={"host": "n1", "gpu": "1"}, started_at=0.0, fired_at=0.0)
    got = fleet_states(gpus, [fired, info], since=0.0, until=180.0, points=3, thresholds=DEFAULT_THRESHOLDS)
    assert got["ts"] == [0.0, 60.0, 120.0] and got["step"] == 60.0
    assert [got[s] for s in ("busy", "wasted", "idle", "lost")] == [
        [1, 2, 0], [0, 0, 1], [1, 1, 1], [1, 0, 1]]
