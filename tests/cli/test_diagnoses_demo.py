"""The demo's diagnosis hosts: the real collector on the demo's own config (cli/demo.yaml, short windows)
dials the fake scenarios over real SSH, and the real `gpufleet alerts` shows input_bound, idle_peers,
near_oom and underused within the 2 minutes the demo promises."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from gpufleet.cli.demo import DEMO_HOSTS, demo_config
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, run_cli

pytestmark = pytest.mark.slow

DIAGNOSES = {"input_bound": "gpu-node-13", "idle_peers": "gpu-node-15", "near_oom": "gpu-node-17",
             "underused": "gpu-node-19"}


@pytest.mark.timeout(240)
async def test_demo_hosts_show_the_diagnoses_within_two_minutes(home: Path) -> None:
    hosts = {h: s for h, s in DEMO_HOSTS.items() if h in DIAGNOSES.values()}
    assert len(hosts) == 4, "the demo runs a host per diagnosis"
    env = cli_env(home)
    cfg = demo_config(home / "demo")
    async with SimFleet(hosts, interval=1.0, workdir=home / "fleet") as fleet:
        cfg.hosts = fleet.host_configs()
        collector = Collector(cfg)
        await collector.start()
        started = time.monotonic()
        firing: dict[str, set[str]] = {}
        active: list[dict[str, Any]] = []
        try:
            while time.monotonic() - started < 120:
                r = await run_cli("alerts", "--socket", collector.api_socket, "--json", env=env)
                assert r.rc == 0, r.err
                firing = {}
                active = [a for a in json.loads(r.out)["active"] if a["state"] == "firing"]
                for a in active:
                    if a["state"] == "firing":
                        firing.setdefault(a["rule"], set()).add(a["labels"]["host"])
                if all(host in firing.get(rule, ()) for rule, host in DIAGNOSES.items()):
                    break
                await asyncio.sleep(2)
            took = time.monotonic() - started
            r = await run_cli("alerts", "--socket", collector.api_socket, env=env)
        finally:
            await collector.stop()
    assert all(host in firing.get(rule, ()) for rule, host in DIAGNOSES.items()), (took, firing)
    # each only where it belongs: the well-fed and roomy jobs next to them are not flagged
    assert firing["input_bound"] == {"gpu-node-13"} and firing["near_oom"] == {"gpu-node-17"}
    assert firing["idle_peers"] == {"gpu-node-15"} and firing["underused"] == {"gpu-node-19"}
    assert _gpus(active, "idle_peers") == ["1", "2", "3"], "the ranks that sit idle, not the busy one"
    assert r.rc == 0 and "input-bound" in r.out and "near out of memory" in r.out, r.out
    print(f"\nall four diagnoses firing {took:.0f} s after the collector started")


def _gpus(alerts: list[dict[str, Any]], rule: str) -> list[str]:
    return sorted(a["labels"]["gpu"] for a in alerts if a["rule"] == rule)
