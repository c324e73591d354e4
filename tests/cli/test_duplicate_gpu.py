"""Two hosts that report the same GPU UUIDs (here two `--fake busy` agents, as a cloned image or one machine
listed twice would) keep apart histories and raise one duplicate_gpu alert per GPU naming both (issue 10)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.store import raw

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until, write_config

pytestmark = pytest.mark.slow


async def test_same_uuids_on_two_hosts(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    env = cli_env(home)
    async with SimFleet({"gpu-a": "busy", "gpu-b": "busy"}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        async with collector_running(cfg, env):
            async def duplicates() -> Any:
                r = await run_cli("alerts", "-c", str(cfg), "--json", env=env)
                if r.rc != 0:
                    return None
                found = [a for a in json.loads(r.out)["active"] if a["rule"] == "duplicate_gpu"]
                return found if len(found) == 4 else None

            found = await until(duplicates)
            assert {a["labels"]["host"] for a in found} == {"gpu-b"}  # one alert per GPU, not one per host
            assert {a["labels"]["gpu"] for a in found} == {"0", "1", "2", "3"}
            assert all("gpu-a and gpu-b" in a["annotations"]["summary"] for a in found), found[0]
            await asyncio.sleep(2.0)

    db = sqlite3.connect(home / "gpufleet.db")
    try:
        per_host = dict(db.execute(
            "SELECT h.name, count(*) FROM gpus g JOIN hosts h ON h.id = g.host_id GROUP BY h.name"
        ).fetchall())
        moves = db.execute("SELECT count(*) FROM gpu_placements").fetchone()[0]
        host_of = dict(db.execute("SELECT g.id, h.name FROM gpus g JOIN hosts h ON h.id = g.host_id"))
        samples = Counter(host_of[r[0]] for r in raw.all_rows(db))
    finally:
        db.close()
    assert per_host == {"gpu-a": 4, "gpu-b": 4}
    assert moves == 8  # one placement each, no "move" per frame
    assert samples["gpu-a"] > 0 and abs(samples["gpu-a"] - samples["gpu-b"]) <= 8 * 4, samples
