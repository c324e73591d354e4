"""A clean SIGTERM of a real `gpufleet collector run` is not an observation of the hosts: the database keeps
no host_down alert and no "collector stopping" host state (issue 11.3)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until, write_config

pytestmark = pytest.mark.slow
HOSTS = 6


async def test_sigterm_leaves_no_host_down_alert(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    env = cli_env(home)
    scenarios = {f"n{i}": "busy" for i in range(HOSTS)}
    async with SimFleet(scenarios, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        async with collector_running(cfg, env):
            async def all_up() -> bool:
                r = await run_cli("status", "-c", str(cfg), "--json", env=env)
                return r.rc == 0 and json.loads(r.out)["totals"]["hosts_up"] == HOSTS

            await until(all_up)
            await asyncio.sleep(1.5)  # a few ticks of the engine with every host up

    db = sqlite3.connect(home / "gpufleet.db")
    try:
        alerts = db.execute("SELECT rule, state, annotations FROM alerts WHERE rule = 'host_down'").fetchall()
        hosts = db.execute("SELECT name, status, reason FROM hosts").fetchall()
    finally:
        db.close()
    assert alerts == [], alerts
    assert len(hosts) == HOSTS and all(status == "up" for _name, status, _reason in hosts), hosts
