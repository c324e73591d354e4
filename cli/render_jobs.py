"""``gpufleet jobs``: per-job efficiency records, newest first, the diagnoses seen as the last column; a Slurm
job's GPUs as used of allocated (``1/2``) and its GPU-hours allocated but unused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.cli import convert
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.timeparse import fmt_ts
from gpufleet.collector.model.jobkey import job_label
from gpufleet.collector.model.records import JobRecord
from gpufleet.collector.model.views import pod_label, slurm_label
from gpufleet.collector.units import fmt_duration, fmt_pct, fmt_size_short
from rich.console import Group, RenderableType
from rich.text import Text

WASTE_STYLE = "bold red"


def records(rows: Iterable[Mapping[str, Any]] | None) -> list[JobRecord]:
    return convert.many(JobRecord, rows)


def _where(r: JobRecord) -> tuple[str, str]:
    """(HOST, GPU) cells: ``gpu-node-15`` and ``1,2,3``; across hosts ``n1,n2`` and ``n1:0 n2:1,2``."""
    by: dict[str, list[str]] = {}
    for g in r.gpus:
        host, _, idx = g.rpartition(":")
        by.setdefault(host, []).append(idx)
    held = (g.rpartition(":")[0] for g in r.gpus_allocated)  # a Slurm job that ran nothing: where it sat
    hosts = list(dict.fromkeys([*r.hosts, *by, *held]))
    if len(by) <= 1:
        return ",".join(hosts) or "-", ",".join(next(iter(by.values()), [])) or "-"
    return ",".join(hosts), " ".join(f"{h}:{','.join(i)}" for h, i in by.items())


def _used_of_allocated(r: JobRecord) -> Cell:
    """A Slurm job, the GPUs it used of those Slurm gave it: ``1/2`` (yellow: some unused)."""
    if not r.gpus_allocated:
        return "-"
    used = len(set(r.gpus) & set(r.gpus_allocated))
    text = f"{used}/{len(r.gpus_allocated)}"
    return (text, "yellow") if used < len(r.gpus_allocated) else text


def _job(r: JobRecord) -> str:
    """``90210 train-llm (nlp/h100)`` for a Slurm job Slurm named, ``ml/train-0 (trainer)`` for a pod the
    kubelet named, else the key's own label."""
    pod = pod_label(r.pod_namespace, r.pod_name, r.container_name)
    if pod is not None and not r.key.startswith("slurm:"):
        return pod
    if not r.key.startswith("slurm:") or r.slurm_name is None:
        return job_label(r.key)
    return slurm_label(r.key[6:], r.slurm_name, r.slurm_account, r.slurm_partition) or job_label(r.key)


def render_jobs(rows: Iterable[Mapping[str, Any]] | None, width: int) -> RenderableType:
    jobs = records(rows)
    if not jobs:
        return Text("No finished jobs in this range.", style="dim")
    slurm = any(r.gpus_allocated for r in jobs)
    # who, which job, where and how much waste are never cut (issue 36: "job 81…" at 80 columns); the
    # end time, the peaks and the memory give way first
    cols = [Col("ENDED", drop=3), Col("USER"), Col("JOB"), Col("HOST"), Col("GPU", right=True),
            Col("TOOK", right=True), Col("GPU-H", right=True), Col("UTIL", right=True, drop=1),
            Col("PEAK", right=True, drop=4), Col("MEM", right=True, drop=2), Col("WASTE", right=True)]
    if slurm:
        cols += [Col("USED/ALLOC", right=True), Col("UNUSED-H", right=True)]
    table: list[list[Cell]] = []
    for r in jobs:
        waste = fmt_pct(r.waste_pct, compact=True)
        diagnoses = ", ".join(r.diagnoses)
        row: list[Cell] = [
            fmt_ts(r.ended)[5:16], r.user, _job(r), *_where(r), fmt_duration(r.ended - r.started),
            f"{r.gpu_hours:.2f}", fmt_pct(r.mean_util, compact=True), fmt_pct(r.peak_util, compact=True),
            fmt_size_short(r.peak_memory),
            (waste, WASTE_STYLE) if (r.waste_pct or 0) >= 50 else waste,
        ]
        if slurm:
            unused = f"{r.gpu_hours_unused:.2f}" if r.gpus_allocated else "-"
            row += [_used_of_allocated(r), (unused, WASTE_STYLE) if r.gpu_hours_unused > 0 else unused]
        table.append([*row, (diagnoses, "yellow") if diagnoses else ""])
    total = sum(r.gpu_hours for r in jobs)
    text = f"{len(jobs)} jobs, {total:.2f} GPU-hours held"
    if slurm:
        allocated = sum(r.gpu_hours_allocated for r in jobs)
        unused_h = sum(r.gpu_hours_unused for r in jobs)
        text += f"; Slurm: {allocated:.2f} GPU-hours allocated, {unused_h:.2f} of them unused"
    foot = Text(text, style="dim")
    return Group(grid(cols, table, width, tail="DIAGNOSES", tail_min=20), foot)
