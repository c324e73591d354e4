"""End to end: the real collector daemon, a simulated fleet behind real SSH on loopback, /metrics on."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, MetricsConfig, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet
from prometheus_client.parser import text_string_to_metric_families

from tests.metrics.metrics_testkit import run_promtool


def _fetch(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback only
        return resp.headers["Content-Type"], resp.read().decode()


async def test_daemon_serves_fleet_metrics(tmp_path: Path, promtool: str) -> None:
    async with SimFleet(2, mode="inproc", interval=0.1) as fleet:
        cfg = Config(hosts=fleet.host_configs(), storage=StorageConfig(path=str(tmp_path / "db.sqlite")),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")), metrics=MetricsConfig("127.0.0.1:0"),
                     rules=default_rules())
        collector = Collector(cfg)
        await collector.start()
        try:
            for _ in range(100):  # bounded: 10 s
                if all(h.snapshot is not None for h in collector.live.hosts.values()):
                    break
                await asyncio.sleep(0.1)
            port = collector.metrics_port
            assert port
            ctype, text = await asyncio.to_thread(_fetch, f"http://127.0.0.1:{port}/metrics")
        finally:
            await collector.stop()
    assert ctype.startswith("text/plain; version=0.0.4")
    series = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    up = {lab["host"]: v for n, lab, v in series if n == "gpufleet_host_up"}
    assert up == {name: 1.0 for name in fleet.hosts}
    util_hosts = {lab["host"] for n, lab, _ in series if n == "gpufleet_gpu_utilization_percent"}
    assert util_hosts == set(fleet.hosts)
    assert any(n == "gpufleet_collector_frames_total" and v > 0 for n, _, v in series)
    res = run_promtool(promtool, "check", "metrics", stdin=text)
    assert res.returncode == 0 and not res.stdout.strip(), res
