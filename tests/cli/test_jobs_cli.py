"""`gpufleet jobs` on real parts: the real collector dials a fake host over real SSH, a job there ends
(zombie.yaml: dave's generate.py exits at 8 s), its record lands in the real store, and the real CLI lists it,
from the running collector and from the stored file once the collector is gone (the read-only fallback)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, run_cli

pytestmark = pytest.mark.slow


async def test_a_finished_job_is_listed_live_and_from_the_store(home: Path) -> None:
    env = cli_env(home)
    db = home / "gpufleet.db"
    async with SimFleet({"n5": "zombie"}, interval=0.5, workdir=home / "fleet") as fleet:
        cfg = Config(hosts=fleet.host_configs(), rules=default_rules(),
                     storage=StorageConfig(path=str(db), batch_max_delay=0.05),
                     api=ApiConfig(socket=str(home / "gpufleet.sock")))
        collector = Collector(cfg)
        await collector.start()
        try:
            deadline = time.monotonic() + 60
            rows: list[dict[str, Any]] = []
            while time.monotonic() < deadline and not rows:
                await asyncio.sleep(1)
                r = await run_cli("jobs", "--socket", collector.api_socket, "--json", env=env)
                assert r.rc == 0, r.err
                rows = [j for j in json.loads(r.out) if j["user"] == "dave"]
            live = await run_cli("jobs", "--socket", collector.api_socket, env=env)
        finally:
            await collector.stop()
    assert rows, "dave's job was not recorded within 60 s"
    [job] = rows
    assert job["key"] == "pid:13579.{}@n5".format(job["key"].split(".")[1].split("@")[0])
    assert job["hosts"] == ["n5"] and job["gpus"] == ["n5:1"]
    assert job["command"] == "python generate.py"
    assert 3 <= job["ended"] - job["started"] <= 1000 + 60  # started 900 s before the agent (start_offset_s)
    assert 70 <= job["mean_util"] <= 85 and job["peak_util"] <= 85 and job["waste_pct"] == 0
    assert job["peak_memory"] == 12288 << 20
    assert live.rc == 0 and "dave" in live.out and "pid 13579" in live.out
    row = next(line for line in live.out.splitlines() if "pid 13579" in line)
    assert row.split()[5:7] == ["n5", "1"], row  # the host and the GPU, each in its column

    # the collector is gone: the same command reads the stored records
    r = await run_cli("jobs", "--db", str(db), "--socket", str(home / "absent.sock"), "--json", env=env)
    assert r.rc == 0, r.err
    assert [j["key"] for j in json.loads(r.out) if j["user"] == "dave"] == [job["key"]]
    r = await run_cli("jobs", "--db", str(db), "--socket", str(home / "absent.sock"), "--user", "nobody",
                      env=env)
    assert r.rc == 0 and "No finished jobs" in r.out, r.out
    r = await run_cli("jobs", "--db", str(db), "--socket", str(home / "absent.sock"), "--since", "soon",
                      env=env)
    assert r.rc == 2 and r.err.startswith("gpufleet: "), r.err
