"""After a restart, a host that stays down keeps what the store knew: last seen, GPUs, agent version
(issue 11.5: it showed SEEN "never", GPUS 0, AGENT "-" though the store had seen it 40 s before)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until, write_config

pytestmark = pytest.mark.slow


async def test_host_down_across_a_restart_keeps_its_last_state(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    env = cli_env(home)
    async with SimFleet({"n1": "busy", "n2": "busy"}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        async with collector_running(cfg, env):
            async def both_up() -> Any:
                r = await run_cli("hosts", "-c", str(cfg), "--json", env=env)
                hosts = {h["name"]: h for h in json.loads(r.out)} if r.rc == 0 else {}
                return hosts if len(hosts) == 2 and all(h["gpus"] == 4 for h in hosts.values()) else None

            before = await until(both_up)
        await fleet.cut("n2")  # gone while the collector was stopped, and stays gone

        async with collector_running(cfg, env):
            async def live() -> bool:
                r = await run_cli("status", "-c", str(cfg), "--json", env=env)
                return r.rc == 0 and json.loads(r.out)["source"] == "live"

            await until(live)  # the new collector answers (not the store fallback)

            async def n1_up() -> Any:
                r = await run_cli("hosts", "-c", str(cfg), "--json", env=env)
                hosts = {h["name"]: h for h in json.loads(r.out)} if r.rc == 0 else {}
                return hosts if hosts.get("n1", {}).get("status") == "up" else None

            after = await until(n1_up)
            n2 = after["n2"]
            assert n2["status"] in ("connecting", "down")
            assert n2["gpus"] == 4 and n2["agent_version"] == before["n2"]["agent_version"]
            assert n2["last_seen"] is not None and n2["last_seen"] >= before["n2"]["last_seen"]
            r = await run_cli("hosts", "-c", str(cfg), env=env)
            line = next(ln for ln in r.out.splitlines() if ln.strip().startswith("n2"))
            assert "never" not in line, r.out

