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
from gpufleet.collector.units import fmt_duration_short, fmt_pct, fmt_size_short
from rich.console import Group, RenderableType
from rich.text import Text

WASTE_STYLE = "bold red"


def records(rows: Iterable[Mapping[str, Any]] | None) -> list[JobRecord]:
    return convert.many(JobRecord, rows)


def _gpus(r: JobRecord) -> Cell:
    """``2 on n3``; a Slurm job, the GPUs it used of those Slurm gave it: ``1/2 on n3`` (yellow: some
    unused)."""
    hosts = {h for h, _, _ in (g.rpartition(":") for g in r.gpus_allocated)} | set(r.hosts)
    where = f"on {next(iter(hosts))}" if len(hosts) == 1 else f"on {len(hosts)} hosts"
    if not r.gpus_allocated:
        return f"{len(r.gpus)} {where}"
    used = len(set(r.gpus) & set(r.gpus_allocated))
    text = f"{used}/{len(r.gpus_allocated)} {where}"
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
    cols = [Col("ENDED"), Col("USER", shrink=True), Col("JOB", shrink=True),
            Col("GPUS USED/ALLOC" if slurm else "GPUS", shrink=True),
            Col("TOOK", right=True), Col("GPU-H", right=True), Col("UTIL", right=True),
            Col("PEAK", right=True), Col("MEM", right=True), Col("WASTE", right=True)]
    if slurm:
        cols.append(Col("UNUSED-H", right=True))
    table: list[list[Cell]] = []
    for r in jobs:
        waste = fmt_pct(r.waste_pct, compact=True)
        diagnoses = ", ".join(r.diagnoses)
        row: list[Cell] = [
            fmt_ts(r.ended), r.user, _job(r), _gpus(r), fmt_duration_short(r.ended - r.started),
            f"{r.gpu_hours:.2f}", fmt_pct(r.mean_util, compact=True), fmt_pct(r.peak_util, compact=True),
            fmt_size_short(r.peak_memory),
            (waste, WASTE_STYLE) if (r.waste_pct or 0) >= 50 else waste,
        ]
        if slurm:
            unused = f"{r.gpu_hours_unused:.2f}" if r.gpus_allocated else "-"
            row.append((unused, WASTE_STYLE) if r.gpu_hours_unused > 0 else unused)
        table.append([*row, (diagnoses, "yellow") if diagnoses else ""])
    total = sum(r.gpu_hours for r in jobs)
    text = f"{len(jobs)} jobs, {total:.2f} GPU-hours held"
    if slurm:
        allocated = sum(r.gpu_hours_allocated for r in jobs)
        unused_h = sum(r.gpu_hours_unused for r in jobs)
        text += f"; Slurm: {allocated:.2f} GPU-hours allocated, {unused_h:.2f} of them unused"
    foot = Text(text, style="dim")
    return Group(grid(cols, table, width, tail="DIAGNOSES", tail_min=20), foot)
