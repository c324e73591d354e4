"""The optional end-of-job note (alerting.job_notes): a job's record, mailed to its user through the user
notifier when the job releases its GPUs; off by default, small jobs and unknown users get none."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
from gpufleet.collector.model.records import JobRecord
from gpufleet.collector.notify.jobnotes import job_note
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import AlertingConfig, ApiConfig, Config, HostConfig, StorageConfig

from tests.webhook import Webhook

GIB = 1 << 30
NOTES = AlertingConfig(notify_users=True, user_email_domain="example.org", user_notifier="json://x",
                       job_notes=True)


def record(**kw: object) -> JobRecord:
    base: dict[str, object] = dict(
        key="slurm:90210", user="alice", started=1_764_756_000.0, ended=1_764_756_000.0 + 7800,
        hosts=["n1", "n2"], gpus=["n1:0", "n2:0"], command="python train.py", gpu_hours=4.33,
        mean_util=41.5, peak_util=99.0, peak_memory=70 * GIB, waste_pct=48.0,
        diagnoses=["idle_peers", "input_bound"])
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def test_the_note_summarises_the_record_and_says_what_to_check() -> None:
    n = job_note(record(), NOTES, 5.0)
    assert n is not None and n.kind == "user" and n.recipient == "alice@example.org"
    assert n.targets == frozenset({"users"}) and n.alerts == [] and n.status is None
    assert n.title == "gpufleet: your job 90210 finished: 4.33 GPU-hours, 48 % wasted"
    assert n.body.splitlines() == [
        "Your job 90210 (python train.py) released its GPUs on n1, n2 after 2h10m "
        "(2025-12-03 10:00 UTC to 2025-12-03 12:10 UTC).",
        "",
        "GPUs: 2 (n1:0, n2:0), 4.33 GPU-hours held",
        "GPU util: mean 42 %, peak 99 %",
        "Peak memory on one GPU: 70.0 GiB",
        "Wasted: 48 % of the held time (idle or stuck while holding memory)",
        "",
        "Seen while it ran, and what to check:",
        "* idle_peers: only some of the job's GPUs computed: DDP setup, CUDA_VISIBLE_DEVICES, "
        "a missing .cuda()",
        "* input_bound: util sawtooth: the input pipeline (DataLoader num_workers, pin_memory, storage)",
        "",
        "All your jobs: gpufleet jobs --user alice --since 7d",
    ]
    assert n.data is not None and n.data["key"] == "slurm:90210"
    assert n.group_key == '{note="job_end",user="alice"}', "one log entry per user, not per job"


def test_a_slurm_job_that_held_gpus_it_never_ran_on_is_told_so() -> None:
    """Issue 37: the note says how many GPUs Slurm gave the job and how many it used; a job that ran nothing
    (no GPU-hours held) is told too."""
    n = job_note(record(gpus_allocated=["n1:0", "n1:1", "n2:0", "n2:1"], gpu_hours_allocated=8.66,
                        gpu_hours_unused=4.33, diagnoses=["allocated_unused"]), NOTES, 5.0)
    assert n is not None
    lines = n.body.splitlines()
    assert lines[3] == ("Slurm gave it 4 GPUs (n1:0, n1:1, n2:0, n2:1); it used 2: 4.33 of 8.66 allocated "
                        "GPU-hours unused")
    assert lines[-3].startswith("* allocated_unused: the job held GPUs it never ran on: ask for fewer")
    idle = job_note(record(hosts=[], gpus=[], gpu_hours=0.0, gpus_allocated=["n3:2"], gpu_hours_allocated=1.0,
                           gpu_hours_unused=1.0), NOTES, 5.0)
    assert idle is not None and "released its GPUs on n3 after" in idle.body
    assert "it used 0: 1.00 of 1.00 allocated GPU-hours unused" in idle.body


@pytest.mark.parametrize("change, alerting", [
    ({}, AlertingConfig(notify_users=True, user_email_domain="example.org")),  # job_notes off (default)
    ({"gpu_hours": 0.05}, NOTES),  # under job_notes_min_gpu_hours (0.1)
    ({"user": "?"}, NOTES),  # unattributed: no address
    ({"user": "uid1234"}, NOTES),
])
def test_no_note(change: dict[str, object], alerting: AlertingConfig) -> None:
    assert job_note(record(**change), alerting, 5.0) is None


SCENARIO = """
hostname: n1
gpus:
  - name: NVIDIA H100 80GB HBM3
    power_limit_w: 700
    processes:
      - {pid: 4242, user: alice, command: python train.py, memory_mib: 20480, sm_util: 60, job: "777",
         start_offset_s: -60, stop_at: 2}
"""


async def test_a_finished_job_reaches_its_user_over_http(tmp_path: Path, receiver: Webhook) -> None:
    """Real agent (fake backend) -> collector -> job record -> user notifier (apprise json://) -> HTTP."""
    scenario = tmp_path / "n1.yaml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    host = HostConfig(name="n1", transport="local", interval=0.2,
                      agent_command=f"{sys.executable} -m gpufleet.agent --fake {scenario} --interval 0.2")
    url = receiver.base.replace("http://", "json://") + "/notes"
    alerting = AlertingConfig(notify_users=True, user_emails={"alice": "alice@example.org"},
                              user_notifier=url, job_notes=True, job_notes_min_gpu_hours=0.0,
                              retry_backoff=0.05)
    cfg = Config(hosts=[host], storage=StorageConfig(path=str(tmp_path / "f.db"), batch_max_delay=0.05),
                 api=ApiConfig(socket=str(tmp_path / "api.sock")), alerting=alerting)
    collector = Collector(cfg)
    await collector.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not receiver.requests and loop.time() < deadline:
            await asyncio.sleep(0.1)
    finally:
        await collector.stop()
    [got] = receiver.requests
    assert got.path.startswith("/notes")
    assert got.body["title"].startswith("gpufleet: your job 777 finished: ")
    assert "Your job 777 (python train.py) released its GPUs on n1 after " in got.body["message"]
    assert "GPUs: 1 (n1:0)" in got.body["message"]
