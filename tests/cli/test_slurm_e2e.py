"""End to end, "whose job is this?": a real agent (fake GPUs whose processes sit in Slurm job cgroups) asks
the stand-in ``scontrol`` for its jobs; the real collector dials it over SSH and stores them; the real CLI
shows the names in status, history, alerts and the report (waste per account and per partition)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_testkit import Result, cli_env, collector_running, run_cli, until, write_config
from tests.slurm.slurm_standin import install

pytest.importorskip("gpufleet.collector.service.daemon")
from gpufleet.collector.simfleet import SimFleet

pytestmark = pytest.mark.slow

#: alice's idle notebook in job 700 (wasted), bob's training in job 701 (busy)
SCENARIO = """
description: two Slurm jobs, one idle, one busy
hostname: slurm-node-01
gpus:
  - name: NVIDIA A100-SXM4-80GB
    memory_total_mib: 81920
    power_limit_w: 400
    idle_power_w: 58
    processes:
      - {pid: 31337, user: alice, command: "python -m ipykernel_launcher", ppid: 31290, memory_mib: 40960,
         sm_util: 2, start_offset_s: -10800, job: "700"}
  - name: NVIDIA A100-SXM4-80GB
    memory_total_mib: 81920
    power_limit_w: 400
    idle_power_w: 58
    processes:
      - {pid: 28841, user: bob, command: "python train.py", ppid: 28830, memory_mib: 63488, sm_util: 95,
         start_offset_s: -5400, job: "701"}
"""
JOBS = {"700": {"name": "notebook", "user": "alice", "uid": 1001, "account": "vision", "partition": "a100"},
        "701": {"name": "train-resnet", "user": "bob", "uid": 1002, "account": "nlp", "partition": "h100"}}


async def test_slurm_names_through_agent_collector_and_cli(home: Path) -> None:
    scontrol, _state = install(home, {"jobs": JOBS})
    scenario = home / "slurm.yaml"
    scenario.write_text(SCENARIO)
    cfg = home / "gpufleet.yaml"
    env = cli_env(home, COLUMNS="200")
    async with SimFleet({"n1": str(scenario)}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home, agent_args=["--fake", str(scenario), "--scontrol", str(scontrol)])
        async with collector_running(cfg, env, stdout=asyncio.subprocess.PIPE):
            async def named() -> Any:
                r = await run_cli("status", "-c", str(cfg), "--json", env=env)
                if r.rc != 0:
                    return None
                procs = [p for h in json.loads(r.out)["hosts"] for g in h["gpus"] for p in g["processes"]]
                return procs if {p.get("job_name") for p in procs} == {"notebook", "train-resnet"} else None

            procs = await until(named)
            by_job = {p["job"]: p for p in procs}
            assert (by_job["700"]["job_account"], by_job["700"]["job_partition"]) == ("vision", "a100")
            assert by_job["701"]["job_state"] == "RUNNING"

            r = await run_cli("status", "-c", str(cfg), env=env)
            assert r.rc == 0 and "[700 notebook]" in r.out and "[701 train-resnet]" in r.out, r.out

            async def alert() -> Any:
                r = await run_cli("alerts", "-c", str(cfg), "--json", env=env)
                active = json.loads(r.out)["active"] if r.rc == 0 else []
                return [a for a in active if a["rule"] == "wasted" and "slurm_job_name" in a["annotations"]]

            [wasted] = await until(alert)
            assert wasted["annotations"]["slurm_account"] == "vision"
            assert not any(k.startswith("slurm") for k in wasted["labels"])  # annotations only
            assert "in Slurm job 700 notebook" in wasted["annotations"]["summary"]

            async def history() -> Result | None:
                r = await run_cli("history", "-c", str(cfg), "--host", "n1", "--since", "10m", env=env)
                return r if r.rc == 0 and "700 notebook (vision/a100)" in r.out else None

            await until(history)

            async def report() -> Any:
                r = await run_cli("report", "-c", str(cfg), "--since", "1h", "--format", "json", env=env)
                data = json.loads(r.out) if r.rc == 0 else {}
                accounts = {a["name"]: a for a in data.get("by_slurm_account", [])}
                return data if accounts.get("vision", {}).get("gpu_hours_wasted", 0) > 0 and \
                    accounts.get("nlp", {}).get("gpu_hours_held", 0) > 0 else None

            data = await until(report)
            nlp = next(a for a in data["by_slurm_account"] if a["name"] == "nlp")
            assert nlp["gpu_hours_wasted"] == 0  # busy: held, not wasted
            assert {p["name"] for p in data["by_slurm_partition"]} == {"a100", "h100"}
            r = await run_cli("report", "-c", str(cfg), "--since", "1h", env=env)
            assert "By Slurm account (GPU-hours):" in r.out and "By Slurm partition (GPU-hours):" in r.out
            assert "vision" in r.out and "h100" in r.out

    # collector gone: the stored history still names the jobs
    r = await run_cli("status", "-c", str(cfg), env=env)
    assert r.rc == 0 and "[700 notebook]" in r.out, r.out + r.err
