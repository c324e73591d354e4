"""`metrics: {dcgm_names: true}`: a real Prometheus scrapes the real collector daemon over a simulated SSH
fleet, and every DCGM DEV query NVIDIA's dashboard uses, and both of its template variables, return data
for every host and GPU (issue 18)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gpufleet.agent import wire
from gpufleet.collector.faces.metrics.dcgm import NAMES, PROF
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, MetricsConfig, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet

from tests.builders import free_port

PROMETHEUS = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin")
pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)"),
              pytest.mark.slow]
QUERIES = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
           "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
           "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]


def _ready(base: str) -> bool:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{base}/-/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


async def test_dcgm_dashboard_queries_return_every_gpu(tmp_path: Path) -> None:
    assert set(QUERIES) == NAMES - PROF  # GPM GPUs only: test_exposition and test_dcgm_dashboard have them
    async with SimFleet(["gpu-a", "gpu-b"], mode="inproc", interval=0.2, gpus=4) as fleet:
        cfg = Config(hosts=fleet.host_configs(), storage=StorageConfig(path=str(tmp_path / "db.sqlite")),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")),
                     metrics=MetricsConfig("127.0.0.1:0", dcgm_names=True), rules=default_rules())
        collector = Collector(cfg)
        await collector.start()
        web = free_port()
        prom_cfg = tmp_path / "prometheus.yml"
        prom_cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n  - job_name: gpufleet\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{collector.metrics_port}']}}]\n")
        assert PROMETHEUS is not None
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
        base = f"http://127.0.0.1:{web}"
        try:
            # an Xid on gpu-b GPU 2: DCGM_FI_DEV_XID_ERRORS is the last Xid's value
            collector.live.frame("gpu-b", wire.Event(ts=0.0, kind="xid", gpu_index=2, xid=79), 0.0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 40
            while loop.time() < deadline:
                if await asyncio.to_thread(_ready, base):
                    counts = [len((await asyncio.to_thread(_api, base, "/api/v1/query", query=q))["result"])
                              for q in QUERIES]
                    if counts == [8] * len(QUERIES):
                        break
                await asyncio.sleep(0.5)
            for q in QUERIES:
                result = (await asyncio.to_thread(_api, base, "/api/v1/query", query=q))["result"]
                got = {(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in result}
                assert got == {(h, str(i)) for h in ("gpu-a", "gpu-b") for i in range(4)}, q
                m = result[0]["metric"]
                assert {"UUID", "modelName", "device"} <= set(m) and m["device"] == f"nvidia{m['gpu']}"
            fb = await asyncio.to_thread(_api, base, "/api/v1/query", query='DCGM_FI_DEV_FB_USED{gpu="0"}')
            # in MiB: GPU 0's rank holds 20 GiB and the GPU 512 MiB more (collector/simfleet/frames.py)
            assert {float(r["value"][1]) for r in fb["result"]} == {20 * 1024.0 + 512}
            clock = await asyncio.to_thread(_api, base, "/api/v1/query", query="max(DCGM_FI_DEV_SM_CLOCK)")
            assert float(clock["result"][0]["value"][1]) == 1980.0  # MHz, as DCGM
            xid = await asyncio.to_thread(_api, base, "/api/v1/query",
                                          query='DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-b",gpu="2"}')
            assert float(xid["result"][0]["value"][1]) == 79.0
            # the dashboard's template variables
            hosts = await asyncio.to_thread(_api, base, "/api/v1/label/Hostname/values",
                                            **{"match[]": "DCGM_FI_DEV_FB_FREE"})
            assert sorted(hosts) == ["gpu-a", "gpu-b"]
            gpus = await asyncio.to_thread(_api, base, "/api/v1/label/gpu/values",
                                           **{"match[]": 'DCGM_FI_DEV_FB_FREE{Hostname=~"gpu-a"}'})
            assert sorted(gpus) == ["0", "1", "2", "3"]
        finally:
            prom.terminate()
            await asyncio.to_thread(prom.wait, 15)
            await collector.stop()
