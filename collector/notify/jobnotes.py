"""The optional end-of-job note (``alerting.job_notes``, off by default): when a job releases its GPUs, its
user gets the job's efficiency record (collector/fleet/jobs.py) in a few lines through the user notifier
(``alerting.user_notifier``, the path the wasted/underused notes take), as a batch system mails a job report.

Jobs holding fewer than ``alerting.job_notes_min_gpu_hours`` GPU-hours get none (a quick test run is not
worth a mail), nor users without an address (collector/notify/build.py :func:`user_email`). The note's group
is the user (the dispatcher's log keeps one entry per group, so it stays bounded by the users): while the
user notifier is down, a user's newer job note supersedes an older one still waiting.
"""

from __future__ import annotations

import dataclasses

from gpufleet.collector.model.jobkey import job_label
from gpufleet.collector.model.records import JobRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.notify.build import USER_NOTIFIER, user_email
from gpufleet.collector.rules.catalog import BY_NAME
from gpufleet.collector.settings import AlertingConfig
from gpufleet.collector.units import fmt_bytes, fmt_duration, fmt_pct, fmt_utc


def _check(rule: str) -> str:
    """What to check for a diagnosis (the rule catalog's words; the rules' descriptions say it at length)."""
    known = BY_NAME.get(rule)
    return known.check if known is not None and known.check else "see gpufleet alerts"


def job_note(record: JobRecord, alerting: AlertingConfig, now: float) -> Notification | None:
    """The note for one finished job, or None when notes are off, the job is small, or nobody to tell."""
    # a Slurm job that held GPUs it never ran on is worth a note however little it computed
    if not alerting.job_notes or max(record.gpu_hours, record.gpu_hours_allocated) \
            < alerting.job_notes_min_gpu_hours:
        return None
    email = user_email(alerting, record.user)
    if email is None:
        return None
    what = job_label(record.key)
    command = f" ({record.command})" if record.command else ""
    where = ", ".join(record.hosts or sorted({g.rpartition(":")[0] for g in record.gpus_allocated}))
    waste = fmt_pct(record.waste_pct, unknown="?")
    took = fmt_duration(record.ended - record.started)
    mean, peak = fmt_pct(record.mean_util, unknown="?"), fmt_pct(record.peak_util, unknown="?")
    lines = [
        f"Your {what}{command} released its GPUs on {where} after {took} "
        f"({fmt_utc(record.started)} to {fmt_utc(record.ended)}).",
        "",
        f"GPUs: {len(record.gpus)} ({', '.join(record.gpus)}), {record.gpu_hours:.2f} GPU-hours held",
        f"GPU util: mean {mean}, peak {peak}",
        f"Peak memory on one GPU: {fmt_bytes(record.peak_memory)}",
        f"Wasted: {waste} of the held time (idle or stuck while holding memory)",
    ]
    if record.gpus_allocated:
        used = len(set(record.gpus) & set(record.gpus_allocated))
        given = f"{len(record.gpus_allocated)} GPUs ({', '.join(record.gpus_allocated)})"
        lines.insert(3, f"Slurm gave it {given}; it used {used}: {record.gpu_hours_unused:.2f} of "
                        f"{record.gpu_hours_allocated:.2f} allocated GPU-hours unused")
    if record.diagnoses:
        lines += ["", "Seen while it ran, and what to check:"]
        lines += [f"* {d}: {_check(d)}" for d in record.diagnoses]
    lines += ["", f"All your jobs: gpufleet jobs --user {record.user} --since 7d"]
    return Notification(
        group_key=f'{{note="job_end",user="{record.user}"}}', status=None, kind="user",
        title=f"gpufleet: your {what} finished: {record.gpu_hours:.2f} GPU-hours, {waste} wasted",
        body="\n".join(lines), group_labels={"user": record.user, "job": record.key},
        targets=frozenset({USER_NOTIFIER}), recipient=email, data=dataclasses.asdict(record), created_at=now)
