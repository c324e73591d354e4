"""``allocated_unused``: a running Slurm job holds GPUs on a host that none of its processes runs on.

What "allocated", "used" and "unused" mean is collector/model/allocation.py's (the accounting, the status view
and the metrics read the same answer); this rule adds how long (``for``, 10 min by default: a job's ranks
start some seconds apart, and a job loading its data has not touched its GPUs yet).

One condition per (host, job) while the job has unused GPUs there. Labels: host, job, user and account (as
Slurm says them), and ``gpus``, the unused indexes (``1``, ``2-3``): each of those GPUs shows the flag
(collector/model/firing.py). The job's name and partition are annotations: Slurm may rename a job
(``scontrol update JobName``) and a label that changes would resolve the alert and open a new one.

A GPU whose state is not known in a snapshot (lost, or its process list unreadable) keeps the verdict of the
job's previous snapshot, so one unreadable sample does not change ``gpus`` (a new alert) and back.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.collector.model import sample
from gpufleet.collector.model.allocation import AllocationUse, uses
from gpufleet.collector.model.gpulist import fmt_indexes, parse_indexes
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.wording import DURATION, keep_command, safe
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_duration


def gpus_text(indexes: Sequence[int]) -> str:
    """``GPU 0``, ``GPUs 0-1``."""
    return f"GPU{'s' if len(set(indexes)) > 1 else ''} {fmt_indexes(indexes)}"


def job_text(a: sample.SlurmAllocation) -> str:
    """``Slurm job 812 llama-pretrain (alice, account nlp)``: the job as the alert names it."""
    name = f" {safe(a.name, 60)}" if a.name else ""
    who = ", ".join(x for x in (safe(a.user, 40) if a.user else "",
                                f"account {safe(a.account, 40)}" if a.account else "") if x)
    return f"Slurm job {a.job}{name}" + (f" ({who})" if who else "")


class AllocatedUnusedRule(Rule):
    name = "allocated_unused"

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._unused: dict[str, dict[str, frozenset[int]]] = {}  # host -> job -> its last unused GPUs
        #: host -> job -> (what the condition was made of, the condition): the same facts, the same words
        self._made: dict[str, dict[str, tuple[tuple[object, ...], Condition]]] = {}

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        snap = ctx.snapshot
        if snap is None:
            return None
        before = self._unused.get(ctx.name, {})
        now_unused = self._unused[ctx.name] = {}  # jobs gone from the snapshot drop out
        made_before = self._made.get(ctx.name, {})
        made = self._made[ctx.name] = {}
        out: list[Condition] = []
        for use in self.facts(ctx, snap).allocation_uses():
            judged = set(use.used) | set(use.unused)
            kept = {i for i in before.get(use.job, ()) if i not in judged}  # not known now: as before
            unused = frozenset(use.unused) | kept
            now_unused[use.job] = unused
            if not unused:
                continue
            a = use.allocation
            key = (a.name, a.user, a.account, a.partition, a.state, use.allocated, use.used, unused)
            last = made_before.get(use.job)
            cond = last[1] if last is not None and last[0] == key else self._condition(ctx.name, use,
                                                                                      sorted(unused))
            made[use.job] = (key, cond)
            out.append(cond)
        return out

    def _condition(self, host: str, use: AllocationUse, unused: list[int]) -> Condition:
        a = use.allocation
        labels = {"host": host, "job": a.job}
        if a.user:
            labels["user"] = a.user
        if a.account:
            labels["account"] = a.account
        labels["gpus"] = fmt_indexes(unused)
        held = gpus_text(use.allocated)
        used = [i for i in use.used if i not in unused]
        if used:
            did = f"has used only {gpus_text(used)}"
        else:
            did = "has not used it" if len(use.allocated) == 1 else "has used none of them"
        summary = f"{host}: {job_text(a)} holds {held} and {did} for {DURATION}"
        fewer = f" (--gres=gpu:{len(used)})" if used else ""
        description = (
            f"Slurm gave the job {held} on {host}; no process of the job has run on {gpus_text(unused)}, "
            f"and the scheduler gives no one else a GPU a job holds until the job ends. Make each rank use "
            f"its own GPU (srun, torchrun --nproc-per-node, CUDA_VISIBLE_DEVICES) or ask for fewer{fewer}; "
            f"or keep the job as it is with `{keep_command(labels, self.name)}`.")
        annotations = {"allocated": fmt_indexes(use.allocated), "used": fmt_indexes(used)}
        for key, value in (("slurm_job_name", a.name), ("slurm_partition", a.partition),
                           ("slurm_state", a.state)):
            if value:
                annotations[key] = safe(value, 200)
        return Condition(self.name, labels, summary, description, value=float(len(unused)),
                         annotations=annotations)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        host, job = alert.labels.get("host", ""), alert.labels.get("job", "")
        was = parse_indexes(alert.labels.get("gpus", ""))
        took = fmt_duration(now - alert.started_at)
        use = next((u for u in uses(ctx.snapshot) if u.job == job), None) \
            if ctx is not None and ctx.snapshot is not None else None
        if use is None:
            return (f"Slurm job {job} on {host} no longer holds {gpus_text(was)} (ended or released) "
                    f"after {took}")
        now_used = [i for i in was if i in use.used]
        still = [i for i in was if i in use.unused]
        if now_used and still:
            return (f"Slurm job {job} on {host} now uses {gpus_text(now_used)} after {took}; "
                    f"{gpus_text(still)} still unused")
        if now_used:
            return f"Slurm job {job} on {host} now uses {gpus_text(now_used)} after {took}"
        return f"Slurm job {job} on {host}: {gpus_text(was)} no longer allocated to it after {took}"

    def forget_host(self, host: str) -> None:
        self._unused.pop(host, None)
        self._made.pop(host, None)
