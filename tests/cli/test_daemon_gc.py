"""The collector process runs with the cycle collector's thresholds raised (collector/service/gcpause.py):
with Python's defaults it spent about a third of its CPU there (issue 13). Its stats, and so /metrics, count
the collections and their seconds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from gpufleet.cli.client import ApiClient
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until, write_config

pytestmark = pytest.mark.slow


async def test_the_daemon_collects_cycles_rarely_and_says_so(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    env = cli_env(home)
    async with SimFleet({f"n{i}": "busy" for i in range(8)}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        async with collector_running(cfg, env):
            async def all_up() -> bool:
                r = await run_cli("status", "-c", str(cfg), "--json", env=env)
                return r.rc == 0 and json.loads(r.out)["totals"]["hosts_up"] == 8

            await until(all_up)

            def stats() -> dict[str, float]:
                return dict(ApiClient(str(home / "gpufleet.sock")).call("ping")["stats"])

            before = await asyncio.to_thread(stats)
            await asyncio.sleep(8.0)
            after = await asyncio.to_thread(stats)
    frames = after["frames_total"] - before["frames_total"]
    collections = after["gc_collections_total"] - before["gc_collections_total"]
    assert frames >= 150, (before, after)
    # Python's default thresholds collect here several times a second; the daemon's, about every half minute
    assert collections <= 2, f"{collections:.0f} cycle collections for {frames:.0f} frames"
    assert 0 <= after["gc_seconds_total"] < 1.0
