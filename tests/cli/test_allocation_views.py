"""The same Slurm and Kubernetes facts on every face (issue 37): the fleet view's allocations and unused GPUs,
its JSON both ways, ``status`` at 80 and 200 columns, ``top``'s rows, filter and GPU screen, the web page's
model, ``gpufleet jobs`` and the report; each built by the product's own code from one live host."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from gpufleet.cli.render_jobs import render_jobs
from gpufleet.cli.render_status import status_lines
from gpufleet.cli.top import Row, TopState, detail_screen, matches
from gpufleet.collector.faces.web import model as web_model
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.fleet.query import build_fleet_view
from gpufleet.collector.fleet.report import UsageLine, _assemble, render_report, report_from_dict
from gpufleet.collector.model import sample
from gpufleet.collector.model.codec import fleet_view_from_dict, fleet_view_rows, jsonable, to_json
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import JobRecord, SlurmUsageRow
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.model.views import AllocationView
from rich.console import Console

from tests.builders import alert, gpu, proc, snap

NOW = 1_700_000_000.0


def _state() -> HostState:
    """n3: Slurm job 812 (alice, nlp) holds GPUs 0-1 and runs on 0; a pod of namespace ml runs on GPU 2."""
    rank = proc(7000, "alice", command="python pretrain.py", start=NOW - 600, job="812",
                job_name="llama-pretrain", job_account="nlp", job_partition="gpu", job_state="RUNNING")
    pod = proc(8000, "bob", command="python serve.py", start=NOW - 60, pod="0f6c", pod_namespace="ml",
               pod_name="serve-7d9f", container_name="vllm", container="3" * 64)
    s = snap(gpu(0, util=90, procs=[rank]), gpu(1, util=0, mem=0), gpu(2, util=60, procs=[pod]),
             gpu(3, util=0, mem=0), ts=NOW)
    s.allocations = [sample.SlurmAllocation(job="812", gpu_indexes=[0, 1], name="llama-pretrain",
                                            user="alice", account="nlp", partition="gpu", state="RUNNING")]
    return HostState(name="n3", status="up", since=NOW - 3600, last_seen=NOW, snapshot=s)

FIRING_ALERTS = [alert("allocated_unused", "n3", None, job="812", user="alice", account="nlp", gpus="1")]
FIRING = Firing(FIRING_ALERTS)


def _view(**kw: Any) -> Any:
    return build_fleet_view([_state()], FIRING, now=NOW, **kw)


def test_the_view_says_who_holds_each_gpu() -> None:
    view = _view()
    [host] = view.hosts
    assert host.allocations == [
        AllocationView("812", "llama-pretrain", "alice", "nlp", "gpu", [0, 1], [0], [1])]
    states = [(g.index, g.state, g.allocated_to, g.flags) for g in host.gpus]
    assert states == [(0, "busy", "812", []), (1, "unused", "812", ["unused"]), (2, "busy", None, []),
                      (3, "idle", None, [])]
    t = view.totals
    assert (t.busy, t.unused, t.idle, t.unknown) == (2, 1, 1, 0)
    p = host.gpus[2].processes[0]
    assert (p.pod_namespace, p.pod_name, p.container_name) == ("ml", "serve-7d9f", "vllm")
    # status --user alice: her GPUs, the one she holds and does not use among them
    [mine] = _view(user=["alice"]).hosts
    assert [g.index for g in mine.gpus] == [0, 1] and [a.job for a in mine.allocations] == ["812"]


@pytest.mark.parametrize("rows", [True, False])
def test_the_view_survives_its_json(rows: bool) -> None:
    view = _view()
    wire = fleet_view_rows(view) if rows else view
    back = fleet_view_from_dict(json.loads(to_json(wire)))
    assert back.hosts == view.hosts and back.totals == view.totals


def _text(lines: list[Any]) -> str:
    return "\n".join(line.plain for line in lines)


def test_status_names_the_job_holding_an_unused_gpu_and_the_pods() -> None:
    wide = _text(status_lines(_view(), 200))
    assert "unused by Slurm job 812 llama-pretrain (alice, nlp)" in wide
    assert "1 unused" in wide and "[812 llama-pretrain]" in wide
    assert "[ml/serve-7d9f (vllm)]" in wide
    narrow = _text(status_lines(_view(), 80))
    assert re.search(r"unused by Slurm job 812 llama-\S* ?… +unused$", narrow, re.M) and "1 unused" in narrow
    assert all(len(line) <= 80 for line in narrow.splitlines())


def test_top_filters_by_job_and_shows_the_allocation() -> None:
    view = _view()
    [host] = view.hosts
    rows = [Row(host, g) for g in host.gpus]
    assert [r.gpu.index for r in rows if r.gpu and matches(r, "job:llama")] == [0, 1]
    assert [r.gpu.index for r in rows if r.gpu and matches(r, "job:ml/serve")] == [2]
    assert [r.gpu.index for r in rows if r.gpu and matches(r, "user:alice")] == [0, 1]
    st = TopState(open=("n3", 1), history={"series": [], "since": NOW - 900, "until": NOW})
    screen = _text(detail_screen(view, st, 120, 30))
    assert "Slurm job 812 llama-pretrain (alice, nlp) holds GPUs 0-1 · uses 0 · unused 1" in screen
    st.open = ("n3", 2)
    assert "ml/serve-7d9f (vllm)" in _text(detail_screen(view, st, 120, 30))


@pytest.mark.parametrize("show_commands", [True, False])
def test_the_web_page_reads_the_same_view(show_commands: bool) -> None:
    inputs = web_model.Inputs([_state()], list(FIRING_ALERTS), {}, NOW)
    state = web_model.build_state(inputs, DEFAULT_THRESHOLDS, show_commands=show_commands)
    unused, pod = state["gpus"]["n3/1"], state["gpus"]["n3/2"]
    assert unused[web_model.S] == "unused" and state["totals"]["unused"] == 1
    if show_commands:
        assert unused[web_model.A] == "812 llama-pretrain (alice, nlp)"
        assert pod[web_model.P][0][3] == "ml/serve-7d9f (vllm)"
    else:  # job and pod names say what someone runs: not without the commands
        assert unused[web_model.A] == "job 812 (alice, nlp)"
        assert pod[web_model.P][0][3] is None
    [a] = state["alerts"].values()
    assert (a[0], a[4], a[5]) == ("unused", "1", "alice")



def _render(renderable: Any, width: int = 200) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_jobs_show_gpus_used_of_allocated() -> None:
    llama = JobRecord(key="slurm:812", user="alice", started=NOW - 7200, ended=NOW, hosts=["n3"],
                      gpus=["n3:0"], gpu_hours=2.0, mean_util=90.0, waste_pct=0.0,
                      slurm_name="llama-pretrain", slurm_account="nlp", slurm_partition="gpu",
                      gpus_allocated=["n3:0", "n3:1"],
                      gpu_hours_allocated=4.0, gpu_hours_unused=2.0, diagnoses=["allocated_unused"])
    idle = JobRecord(key="slurm:913", user="bob", started=NOW - 3600, ended=NOW, gpus_allocated=["n4:2"],
                     gpu_hours_allocated=1.0, gpu_hours_unused=1.0)
    notebook = JobRecord(key="pid:1.5@n1", user="carol", started=NOW - 60, ended=NOW, hosts=["n1"],
                         gpus=["n1:0"], gpu_hours=0.02)
    text = _render(render_jobs([jsonable(r) for r in (llama, idle, notebook)], 200))
    assert "USED/ALLOC" in text and "UNUSED-H" in text
    lines = {line.split()[2]: line for line in text.splitlines() if re.match(r"\d\d-\d\d \d\d:\d\d ", line)}
    assert re.search(r"\bn3 +0 .* 1/2 +2\.00", lines["alice"]), lines["alice"]  # HOST GPU ... USED/ALLOC
    assert re.search(r"\bn4 +- .* 0/1 +1\.00", lines["bob"]), lines["bob"]
    assert re.search(r"\bn1 +0 .* - +- ", lines["carol"]), lines["carol"]
    assert "Slurm: 5.00 GPU-hours allocated, 3.00 of them unused" in text


def test_the_report_has_allocated_and_unused_hours_per_account_and_user() -> None:
    def line(name: str, held: float, allocated: float, unused: float) -> SlurmUsageRow:
        return SlurmUsageRow(name, held, held * 0.9, 0.0, 1, allocated, unused)

    slurm = {g: [UsageLine(r.name, r.gpu_hours_held, r.gpu_hours_used, r.gpu_hours_wasted,
                           r.gpu_hours_allocated, r.gpu_hours_unused) for r in rows]
             for g, rows in {"account": [line("nlp", 2.0, 4.0, 2.0), line("vision", 0.0, 1.0, 1.0)],
                             "user": [line("alice", 2.0, 4.0, 2.0), line("bob", 0.0, 1.0, 1.0)]}.items()}
    rep = _assemble(since=NOW - 86400, until=NOW, host=None, rows=[], observed=0.0, free=0.0, alerts=[],
                    faults={}, generated_at=NOW, slurm=slurm)
    text = render_report(rep)
    assert "Slurm: 5.00 GPU-hours allocated to running jobs, 3.00 of them unused (60 %)" in text
    assert "By Slurm user (GPU-hours):" in text and "ALLOCATED" in text and "UNUSED %" in text
    users = text.split("By Slurm user (GPU-hours):")[1].splitlines()
    assert users[2].split()[0] == "alice" and users[2].split()[-4:] == ["4.00", "2.00", "50", "%"]
    back = report_from_dict(json.loads(render_report(rep, "json")))
    assert {g: [(u.name, u.allocated, u.unused) for u in lines] for g, lines in back.slurm.items()} == {
        "account": [("nlp", 4.0, 2.0), ("vision", 1.0, 1.0)],
        "user": [("alice", 4.0, 2.0), ("bob", 1.0, 1.0)]}
    assert "| ALLOCATED | UNUSED | UNUSED % |" in render_report(rep, "markdown")
