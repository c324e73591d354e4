"""Past capacity, the collector sheds evenly and says so: collector_overloaded fires with what it sheds,
`gpufleet hosts` shows the snapshots not stored per host, the stats (/metrics) count them (issue 13)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.collector.model import sample
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, HostConfig, StorageConfig

from tests.builders import gpu, snap


def _snapshot(ts: float) -> sample.Snapshot:
    return snap(*(gpu(i, uuid=f"GPU-{i}", util=50, mem=1 << 30) for i in range(8)), ts=ts)


async def test_a_burst_past_capacity_is_shed_evenly_and_reported(tmp_path: Path) -> None:
    hosts = [HostConfig(name=f"n{i}", transport="local", agent_command="/bin/false") for i in range(50)]
    cfg = Config(hosts=hosts, storage=StorageConfig(path=str(tmp_path / "f.db"), batch_max_delay=0.05),
                 api=ApiConfig(socket=str(tmp_path / "api.sock")))
    collector = Collector(cfg)
    await collector.start()
    try:
        t0 = time.time() - 200  # the store refuses times far from its clock (issue 38): a recent past
        # 8,000 snapshots arrive within one turn of the event loop: far more than the writer can take
        for k in range(160):
            for h in hosts:
                collector.live.frame(h.name, _snapshot(t0 + k), t0 + k)
        stats = collector.stats()
        assert stats["store_shed_total"] > 0 and stats["store_keep_one_in"] >= 2
        assert stats["store_dropped_total"] == 0
        shed = collector.store.shed_by_host
        assert len(shed) == 50 and max(shed.values()) - min(shed.values()) <= 1  # evenly over the hosts
        await collector.alerts.evaluate()
        [alert] = [a for a in collector.alerts.active() if a.rule == "collector_overloaded"]
        assert alert.state == "firing" and "keeping 1 of every" in alert.annotations["summary"]

        env = {**os.environ, "HOME": str(tmp_path), "COLUMNS": "150"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpufleet.cli.main", "hosts", "--socket", str(tmp_path / "api.sock"),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        text = out.decode()
        assert "SHED" in text
        n7 = next(line for line in text.splitlines() if line.startswith("n7 "))
        assert str(shed["n7"]) in n7.split()
    finally:
        await collector.stop()
