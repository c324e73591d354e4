"""End to end, "whose job is this?": a real agent (fake GPUs whose processes sit in Slurm job cgroups) asks
the stand-in ``scontrol`` for its jobs; the real collector dials it over SSH and stores them; the real CLI
shows the names in status, history, alerts and the report (waste per account and per partition)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import Result, cli_env, collector_running, run_cli, until, write_config
from tests.slurm.slurm_standin import install

pytestmark = pytest.mark.slow

#: one A100 of a scenario, its processes to follow
A100 = """
  - name: NVIDIA A100-SXM4-80GB
    memory_total_mib: 81920
    power_limit_w: 400
    idle_power_w: 58
    processes:"""
#: alice's idle notebook in job 700 (wasted), bob's training in job 701 (busy)
SCENARIO = """
description: two Slurm jobs, one idle, one busy
hostname: slurm-node-01
gpus:""" + A100 + """
      - {pid: 31337, user: alice, command: "python -m ipykernel_launcher", ppid: 31290, memory_mib: 40960,
         sm_util: 2, start_offset_s: -10800, job: "700"}""" + A100 + """
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


#: one Slurm job: alice's idle notebook, which ends (its process exits) after a few seconds
ONE_JOB = """
description: one Slurm job that idles and ends
hostname: slurm-node-02
gpus:""" + A100 + """
      - {pid: 4100, user: alice, command: "python -m ipykernel_launcher", ppid: 4000, memory_mib: 20480,
         sm_util: 1, start_offset_s: -600, job: "800"}
timeline:
  - {at: 4, pid: 4100, event: stop}
"""


async def test_one_slurm_job_has_the_same_gpu_hours_in_its_record_and_in_the_report(home: Path) -> None:
    """GPU-hours have one owner (collector/fleet/accounting.py): the job record and the report's Slurm
    account charge the same samples the same seconds, by the samples' own time (the record used to count
    by arrival time and could not agree)."""
    job800 = {"name": "notebook", "user": "alice", "account": "vision", "partition": "a100"}
    scontrol, _state = install(home, {"jobs": {"800": job800}})
    scenario = home / "one-job.yaml"
    scenario.write_text(ONE_JOB)
    env = cli_env(home)
    async with SimFleet({"n1": str(scenario)}, interval=0.2, workdir=home / "fleet") as fleet:
        agent = ["--fake", str(scenario), "--scontrol", str(scontrol)]
        config = Config(hosts=fleet.host_configs(agent_args=agent),
                        storage=StorageConfig(path=str(home / "gpufleet.db")),
                        api=ApiConfig(socket=str(home / "gpufleet.sock")))
        collector = Collector(config)
        await collector.start()
        try:
            async def recorded() -> Any:
                r = await run_cli("jobs", "--socket", collector.api_socket, "--json", env=env)
                jobs = json.loads(r.out) if r.rc == 0 else []
                return next((j for j in jobs if j["key"] == "slurm:800"), None)

            job = await until(recorded, timeout=40)

            async def reported() -> Any:  # the report's Slurm accounts, as the store sums them (unrounded)
                now = time.time()
                rows = await collector.store.slurm_usage("account", since=now - 7200, until=now)
                return next((a for a in rows if a.name == "vision"), None)

            account = await until(reported)
            r = await run_cli("report", "--socket", collector.api_socket, "--since", "2h", env=env)
            assert r.rc == 0 and "vision" in r.out, r.out
        finally:
            await collector.stop()
    assert job["gpu_hours"] > 0 and job["waste_pct"] == pytest.approx(100.0)  # idle from start to end
    assert account.jobs == 1
    assert account.gpu_hours_held == pytest.approx(job["gpu_hours"], rel=1e-9, abs=0), (account, job)
    wasted = job["gpu_hours"] * job["waste_pct"] / 100
    assert account.gpu_hours_wasted == pytest.approx(wasted, rel=1e-9, abs=0)
