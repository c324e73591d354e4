"""Which alerts are one problem, so one problem is one notification and one line (issue 36).

A job whose ranks sit idle fires ``idle_peers`` on each idle GPU (labelled with the job) and, once they have
been idle long enough, ``wasted`` on the same GPUs: six alerts for one DDP job that put its work on one GPU.
Here the alerts that carry a ``job`` label are that job's problem, and every other alert on one of its GPUs
for the same user (wasted, stale, ...) joins it; any other alert is a problem of its own. The alert
engine's grouping (collector/alerts/grouping.py) sends a problem as one notification naming its GPUs; the
``alerts`` command, the demo and the web page list it as one row.

Pure: works on whatever alerts it is given (the engine's, the API's answer, the store's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.collector.model.names import natural_key
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.catalog import flag_name, flag_rank, severity_rank, spec

#: the label that names the job an alert is about (collector/model/jobkey.py group_key)
JOB = "job"


def _gpu_of(a: AlertRecord) -> tuple[str, str, str] | None:
    host, gpu = a.labels.get("host"), a.labels.get("gpu")
    if host is None or gpu is None:
        return None
    return host, gpu, a.labels.get("user", "")


@dataclass(slots=True)
class Problem:
    """One problem: its alerts, the one that says most first (the one naming the job, else the worst)."""

    key: str
    alerts: list[AlertRecord] = field(default_factory=list)

    @property
    def lead(self) -> AlertRecord:
        return self.alerts[0]

    @property
    def flags(self) -> list[str]:
        """The flags of its alerts, each once, the worst first."""
        return sorted({flag_name(a.rule) for a in self.alerts}, key=lambda f: (flag_rank(f), f))

    @property
    def severity(self) -> str:
        return max((a.severity for a in self.alerts), key=severity_rank)

    @property
    def state(self) -> str:
        """firing while any of its alerts fires, else pending (or resolved)."""
        states = {a.state for a in self.alerts}
        return "firing" if "firing" in states else "pending" if "pending" in states else "resolved"

    @property
    def started_at(self) -> float:
        return min(a.started_at for a in self.alerts)

    @property
    def fired_at(self) -> float | None:
        fired = [a.fired_at for a in self.alerts if a.fired_at is not None]
        return min(fired) if fired else None

    @property
    def user(self) -> str:
        return ",".join(sorted({u for a in self.alerts if (u := a.labels.get("user"))}))

    def where(self) -> list[tuple[str, list[str]]]:
        """(host, its GPU indices) in order: the hosts and GPUs the problem is on."""
        out: dict[str, set[str]] = {}
        for a in self.alerts:
            host = a.labels.get("host") or a.labels.get("notifier") or ""
            gpus = out.setdefault(host, set())
            gpu = a.labels.get("gpu") or a.labels.get("gpus")  # gpus: a Slurm job's unused GPUs (0-1)
            if gpu is not None:
                gpus.add(gpu)
        hosts = sorted(out, key=natural_key)
        return [(h, sorted(out[h], key=natural_key)) for h in hosts]

    @property
    def hosts(self) -> str:
        return ",".join(h for h, _ in self.where() if h)

    @property
    def gpus(self) -> str:
        """``1,2,3`` on one host; ``n1:0 n2:1,2`` across hosts; empty for a host's own alert."""
        where = [(h, g) for h, g in self.where() if g]
        if len(where) == 1:
            return ",".join(where[0][1])
        return " ".join(f"{h}:{','.join(g)}" for h, g in where)

    @property
    def info(self) -> bool:
        """Informational only (capacity, a diagnosis for its user): shown apart from what fires."""
        return self.severity == "info"


def problems(alerts: Iterable[AlertRecord]) -> list[Problem]:
    """The alerts as problems, the worst first (severity, then host, GPU and flag), each problem's alerts
    with its lead first."""
    alerts = list(alerts)
    by_gpu: dict[tuple[str, str, str], str] = {}  # (host, gpu, user) -> the job problem holding it
    out: dict[str, Problem] = {}
    for a in alerts:
        job = a.labels.get(JOB)
        if job:
            key = f"{JOB}:{job}"
            out.setdefault(key, Problem(key)).alerts.append(a)
            where = _gpu_of(a)
            if where is not None:
                by_gpu[where] = key
    for a in alerts:
        if a.labels.get(JOB):
            continue
        where = _gpu_of(a)
        joined = by_gpu.get(where) if where is not None and spec_user(a.rule) else None
        key = joined or a.fingerprint
        out.setdefault(key, Problem(key)).alerts.append(a)
    for p in out.values():
        p.alerts.sort(key=lambda a: (not a.labels.get(JOB), -severity_rank(a.severity), flag_rank(
            flag_name(a.rule)), natural_key(a.labels.get("host", "")), natural_key(a.labels.get("gpu", ""))))
    return sorted(out.values(), key=_order)


def spec_user(rule: str) -> bool:
    """The rule's alerts name one user's processes (the catalog's ``user``): they can join a job."""
    try:
        return spec(rule).user
    except KeyError:
        return False


def _order(p: Problem) -> tuple[object, ...]:
    lead = p.lead
    return (-severity_rank(p.severity), natural_key(p.hosts), natural_key(lead.labels.get("gpu", "")),
            flag_rank(flag_name(lead.rule)), p.key)
