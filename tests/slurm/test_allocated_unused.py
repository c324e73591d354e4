"""Issue 37, allocated but unused, all the way on real parts: a real Slurm (tests/slurm/realslurm.py) runs
``sbatch --gres=gpu:2 -J llama-pretrain -A nlp``; the real agent (fake libnvidia-ml.so.1 listing the job's
real ``sleep`` on the first of its GPUs only) asks the real ``scontrol``; the real collector (``gpufleet
collector run``, the agent as its local child) flags the other GPU; the real CLI, the web page's API and
/metrics all say so, and the job's record and the report carry its allocated and unused GPU-hours.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.model.gpulist import fmt_indexes, parse_indexes

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until
from tests.fakenvml import fakelib
from tests.realcollector import Ports, cli_json, http_get, local_config, series, top_screen
from tests.slurm.realslurm import SlurmCluster

pytestmark = pytest.mark.slow

GIB = 1 << 30


@pytest.fixture
def home() -> Iterator[Path]:
    """A short directory (a Unix socket path is limited to ~107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="gf37-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _nvml_state(path: Path, gpu: int, pid: int | None) -> Path:
    """Four idle GPUs; ``pid`` (when given) runs on ``gpu`` with 10 GiB at 35 % util."""
    state: dict[str, Any] = fakelib.default_state(4)
    if pid is not None:
        state["gpus"][gpu].update(util=35, mem_used=10 * GIB,
                                  processes=[{"pid": pid, "mem": 10 * GIB, "sm": 30}])
    return fakelib.write_state(path, state)


def _config(home: Path, cluster: SlurmCluster, ports: Ports) -> Path:
    scontrol = shutil.which("scontrol") or "scontrol"
    return local_config(home, "n3", ["--slurm-node", cluster.node, "--slurm-list-every", "0.5",
                                     "--scontrol", scontrol], ports,
                        rules="  allocated_unused: {for: 1s}\n  idle: {for: 1s}")


async def test_a_job_holding_two_gpus_and_using_one_is_flagged_everywhere(
        slurm_cluster: SlurmCluster, fake_nvml_lib: Path, home: Path) -> None:
    job = slurm_cluster.sbatch("--gres=gpu:2", "-J", "llama-pretrain", "-A", "nlp", "--wrap", "sleep 600")
    try:
        slurm_cluster.wait_state(job, "RUNNING")
        pid = slurm_cluster.wait_pid(job, "sleep")
        found = re.search(r"GRES=gpu:2\(IDX:([0-9,-]+)\)", slurm_cluster.job(job))
        assert found, slurm_cluster.job(job)
        allocated = parse_indexes(found.group(1))
        used, unused = allocated  # the job's sleep runs on the first of its GPUs only
        state = _nvml_state(home / "nvml.state", used, pid)
        ports = Ports()
        cfg = _config(home, slurm_cluster, ports)
        # the cluster's slurm.conf; the caller's COLUMNS must not narrow the screens checked below
        client = cli_env(home, COLUMNS="200", SLURM_CONF=str(slurm_cluster.conf))
        env = fakelib.env_for(fake_nvml_lib, state, client)
        async with collector_running(cfg, env):
            await _check_live(job, allocated, used, unused, cfg, env, ports)
            # the job ends: its process leaves the GPU, Slurm ends the job
            _nvml_state(state, used, None)
            slurm_cluster.run("scancel", job)
            slurm_cluster.wait_state(job, "CANCELLED")
            await _check_history(job, allocated, used, cfg, env)
    finally:
        slurm_cluster.run("scancel", job, check=False)


async def _check_live(job: str, allocated: list[int], used: int, unused: int, cfg: Path, env: dict[str, str],
                      ports: Ports) -> None:
    c = str(cfg)

    async def fired() -> Any:
        got = await cli_json("alerts", "-c", c, env=env)
        firing = [a for a in (got or {}).get("active", []) if a["state"] == "firing"]
        mine = [a for a in firing if a["rule"] == "allocated_unused"]
        idle = {a["labels"]["gpu"] for a in firing if a["rule"] == "idle"}
        return (mine, idle) if mine and len(idle) == 2 else None

    [alert], idle = await until(fired)
    assert alert["labels"] == {"host": "n3", "job": job, "user": "root", "account": "nlp",
                               "gpus": str(unused), "rule": "allocated_unused"}
    notes = alert["annotations"]
    assert (notes["slurm_job_name"], notes["slurm_partition"]) == ("llama-pretrain", "gpu")
    assert (notes["allocated"], notes["used"]) == (fmt_indexes(allocated), str(used))
    summary = notes["summary"]
    assert re.fullmatch(rf"n3: Slurm job {job} llama-pretrain \(root, account nlp\) holds GPUs "
                        rf"{fmt_indexes(allocated)} and has used only GPU {used} for \d+s", summary), summary
    print(f"allocated_unused: {notes['summary']}")
    # the GPU the job holds and does not use is not idle capacity; the two GPUs no job holds are
    assert idle == {str(i) for i in range(4)} - {str(i) for i in allocated}

    view = await cli_json("status", "-c", c, env=env)
    [host] = view["hosts"]
    assert host["allocations"] == [{"job": job, "name": "llama-pretrain", "user": "root", "account": "nlp",
                                     "partition": "gpu", "gpus": allocated, "used": [used],
                                     "unused": [unused]}]
    gpus = {g["index"]: g for g in host["gpus"]}
    assert (gpus[unused]["state"], gpus[unused]["allocated_to"], gpus[unused]["flags"]) == ("unused", job,
                                                                                            ["unused"])
    assert (gpus[used]["state"], gpus[used]["allocated_to"]) == ("busy", job)
    assert gpus[used]["processes"][0]["job_name"] == "llama-pretrain"
    assert (view["totals"]["unused"], view["totals"]["idle"], view["totals"]["busy"]) == (1, 2, 1)

    text = (await run_cli("status", "-c", c, env=env)).out
    assert f"unused by Slurm job {job} llama-pretrain (root, nlp)" in text, text
    listed = (await run_cli("alerts", "-c", c, env=env)).out
    assert re.search(rf"^warning\s+unused\s+n3\s+{unused}\s+root\s", listed, re.M), listed
    assert "1 unused" in text and f"[{job} llama-pretrain]" in text, text

    await top_screen(cfg, Path(env["HOME"]), f"unused by Slurm job {job} llama-pretrain (root, nlp)",
                     "1 unused")

    jobs_now = await run_cli("status", "-c", c, "--user", "root", env=env)
    assert f"unused by Slurm job {job}" in jobs_now.out, jobs_now.out  # the user's GPUs: the unused one too

    page = json.loads(await asyncio.to_thread(http_get, f"http://127.0.0.1:{ports.web}/api/state"))
    cell = page["gpus"][f"n3/{unused}"]
    assert (cell[4], cell[5], cell[8]) == ("unused", ["unused"], f"{job} llama-pretrain (root, nlp)")
    assert page["gpus"][f"n3/{used}"][6][0][3] == f"{job} llama-pretrain"  # the process's job, named
    assert page["totals"]["unused"] == 1
    assert any(a[0] == "unused" and a[4] == str(unused) for a in page["alerts"].values())

    exposition = series(await asyncio.to_thread(http_get, f"http://127.0.0.1:{ports.metrics}/metrics"))
    labels = (("account", "nlp"), ("host", "n3"), ("job", job), ("user", "root"))
    assert exposition[("gpufleet_slurm_gpus_allocated", labels)] == 2
    assert exposition[("gpufleet_slurm_gpus_unused", labels)] == 1
    flagged = {dict(k[1])["gpu"] for k, v in exposition.items()
               if k[0] == "gpufleet_gpu_flag" and dict(k[1])["flag"] == "allocated_unused" and v == 1}
    assert flagged == {str(unused)}


async def _check_history(job: str, allocated: list[int], used: int, cfg: Path, env: dict[str, str]) -> None:
    c = str(cfg)

    async def recorded() -> Any:
        got = await cli_json("jobs", "-c", c, "--since", "1h", env=env)
        return next((r for r in got or [] if r["key"] == f"slurm:{job}"), None)

    record = await until(recorded)
    assert record["gpus"] == [f"n3:{used}"]
    assert record["gpus_allocated"] == [f"n3:{i}" for i in allocated]
    assert 0 < record["gpu_hours_unused"] < record["gpu_hours_allocated"]
    assert record["slurm_name"] == "llama-pretrain" and record["diagnoses"] == ["allocated_unused"]
    text = (await run_cli("jobs", "-c", c, "--since", "1h", env=env)).out
    assert re.search(r"\bn3 +0 .* 1/2 ", text) and "GPU-hours allocated" in text, text

    r = await run_cli("report", "-c", c, "--since", "1h", "--format", "json", env=env)
    assert r.rc == 0, r
    report = json.loads(r.out)
    for group, name in (("account", "nlp"), ("user", "root")):
        [line] = [u for u in report[f"by_slurm_{group}"] if u["name"] == name]
        # the job's own record's hours (it has ended), as the report rounds them (0.001 h); part unused
        assert abs(line["gpu_hours_allocated"] - record["gpu_hours_allocated"]) <= 0.0011, (line, record)
        assert abs(line["gpu_hours_unused"] - record["gpu_hours_unused"]) <= 0.0011, (line, record)
        assert 0 < line["gpu_hours_unused"] <= line["gpu_hours_allocated"], line
    text = (await run_cli("report", "-c", c, "--since", "1h", env=env)).out
    assert "GPU-hours allocated to running jobs" in text and "By Slurm user" in text, text
