"""A clean stop of the collector is not an observation of the hosts: the database keeps no host_down alert
and no "collector stopping" host state (issue 11.3), however long the transport takes to close (issue 35:
the alert engine's tick ran on while the transport closed, and after 3 sampling intervals of the quiet it
had caused itself it fired host_down for every host)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until, write_config

pytestmark = pytest.mark.slow
HOSTS = 6


def stored(db: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(host_down alerts, host rows) as the file keeps them."""
    conn = sqlite3.connect(db)
    try:
        alerts = conn.execute(
            "SELECT rule, state, annotations FROM alerts WHERE rule = 'host_down'").fetchall()
        hosts = conn.execute("SELECT name, status, reason FROM hosts").fetchall()
    finally:
        conn.close()
    return alerts, hosts


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

    alerts, hosts = stored(home / "gpufleet.db")
    assert alerts == [], alerts
    assert len(hosts) == HOSTS and all(status == "up" for _name, status, _reason in hosts), hosts


async def test_a_slow_hang_up_is_not_hosts_going_down(home: Path) -> None:
    """One agent does not read its EOF (stopped): the transport waits out its grace, many sampling intervals
    of quiet, and no host is alerted down."""
    db = home / "gpufleet.db"
    async with SimFleet({"n1": "busy", "n2": "busy"}, interval=0.2, workdir=home / "fleet") as fleet:
        config = Config(hosts=fleet.host_configs(), storage=StorageConfig(path=str(db)),
                        api=ApiConfig(socket=str(home / "gpufleet.sock")))
        collector = Collector(config)
        await collector.start()
        try:
            async def all_up() -> bool:
                return all(h.status == "up" and h.frames > 3 for h in collector.live.hosts.values())

            await until(all_up)
            await asyncio.sleep(1.0)  # ticks of the engine with every host up
            assert fleet.pause_agent("n1") == 1  # its agent will not see EOF: the stop waits for it
        finally:
            loop = asyncio.get_running_loop()
            started = loop.time()
            await collector.stop(timeout=20.0)  # the transport waits 2.5 s for the stopped agent
            took = loop.time() - started
    assert took > 2.0, f"the stop took {took:.1f} s: the quiet it tests is shorter than two ticks"
    alerts, hosts = stored(db)
    assert alerts == [], alerts
    assert sorted(status for _n, status, _r in hosts) == ["up", "up"], hosts
