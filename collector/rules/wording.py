"""How a condition reads: the words and labels every rule's summaries, descriptions and annotations share, so
an alert, a notification and the status screen name a GPU, a process, a Slurm job and the "keep" command
alike; user-controlled text (commands, job names) goes through :func:`safe` first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from gpufleet.collector.model import procname, sample

#: Placeholder a rule may put in a summary/description; the engine replaces it with how long the condition
#: has been true (from the alert's persisted start, so it survives a collector restart).
DURATION = "{duration}"


def safe(text: str | None, limit: int = 120) -> str:
    """User-controlled text (commands) in a summary: bounded, one line, cannot inject the placeholder."""
    if not text:
        return "?"
    one_line = " ".join(text.split())
    one_line = one_line.replace(DURATION, "{ duration }")
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


#: Annotation key -> the ProcessSample field (wire 1.1) it shows.
_SLURM_FIELDS: Final = (("slurm_job_name", "job_name"), ("slurm_user", "job_user"),
                        ("slurm_account", "job_account"), ("slurm_partition", "job_partition"),
                        ("slurm_state", "job_state"))


def slurm_annotations(procs: Iterable[sample.ProcessSample]) -> dict[str, str]:
    """What Slurm says of the processes' jobs, for an alert's annotations.

    Annotations, never labels: the agent names a job some seconds after it first reports it (its scontrol
    runs in the background), and a label that appears late would change the alert's fingerprint and its
    notification group, i.e. resolve one alert and fire a "new" one. Annotations follow the latest sample."""
    procs = list(procs)
    out: dict[str, str] = {}
    for key, attr in _SLURM_FIELDS:
        values = sorted({v for p in procs if (v := getattr(p, attr))})
        if values:
            out[key] = safe(",".join(values), 200)
    return out


def slurm_note(procs: Iterable[sample.ProcessSample]) -> str:
    """`` in Slurm job 90210 train-llm`` for a summary, where Slurm named the (one) job; else empty."""
    named = {(p.job, p.job_name) for p in procs if p.job and p.job_name}
    if len(named) != 1:
        return ""
    [(job, name)] = named
    return f" in Slurm job {job} {safe(name, 60)}"


def gpu_labels(host: str, gpu: sample.GpuSample) -> dict[str, str]:
    return {"host": host, "gpu": str(gpu.index), "uuid": gpu.uuid}


def keep_command(labels: dict[str, str], rule: str, duration: str = "2h") -> str:
    """The exact CLI line that keeps (snoozes) one user's alert on one GPU: scoped to host, GPU, user and
    rule, so keeping your own notebook never mutes someone else's waste on a shared GPU."""
    parts = ["gpufleet silence add", f"--host {labels.get('host', '')}"]
    if labels.get("gpu"):
        parts.append(f"--gpu {labels['gpu']}")
    if labels.get("user"):
        parts.append(f"--user {labels['user']}")
    parts += [f"--rule {rule}", f"--for {duration}", "--comment keep"]
    return " ".join(parts)


def short_command(command: str | None) -> str:
    """The program name of a command line, as the status view shows it (see :mod:`procname`)."""
    return safe(procname.short_command(command, 60), 60)
