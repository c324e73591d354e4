"""GPU-hours: the seconds each GPU sample charges and to whom. The one owner of the sums the report, the web
page's waste per user, ``history`` and the per-job records show, so one Slurm job has the same hours in the
report and in its job record.

- *Seconds*: a sample charges the time since the same GPU's previous sample, by the agent's clock (the
  sample's own time, not when it arrived), capped so an outage is not billed (:func:`credit`); a sample
  not newer than the last one (replayed, late) charges nothing (:class:`GpuClock`).
- *To whom*: every distinct user, and every job, with a process holding memory on the GPU is charged the
  whole GPU (two users sharing a GPU both hold it): held += seconds; used += seconds x util / 100; wasted
  += seconds when the sample is waste for that holder (:func:`~gpufleet.collector.model.classify.waste_of`:
  idle or stuck while holding memory, or a zombie holding memory). A job is wasting when one of its
  holders is.
- *Orphaned memory* (in use with no process visible) is charged to nobody: its job has ended (its record
  is written), and every other view (status, alerts, the page) names no user for it either (issue 36:
  one story everywhere); the orphaned_memory alert and the GPU's history say whose process last held it.
- *Allocated* (Slurm): every GPU a running Slurm job holds charges the job its seconds, used or not, and
  *unused* the seconds no process of the job was on it (:func:`allocation_charge`; which GPUs those are is
  collector/model/allocation.py's). These are the job's, its Slurm user's and its account's hours; a GPU the
  snapshot could not judge (lost, process list unreadable) is allocated but never unused.
The store keeps the sums per hour (store/usage.py, store/slurm.py); the job tracker per job (fleet/jobs.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from gpufleet.collector.model.allocation import AllocationUse
from gpufleet.collector.model.classify import holds_memory, user_of
from gpufleet.collector.model.jobkey import job_key
from gpufleet.collector.model.sample import GpuSample

#: Never charge more than this many seconds for one sample, however long the gap before it.
MAX_GAP: Final = 10.0
#: ... nor more than this many times the GPU's typical sampling interval.
GAP_FACTOR: Final = 3.0

#: seconds held, used (weighted by util) and wasted
Hours = tuple[float, float, float]


def credit(dt: float, typical: float | None) -> tuple[float, float | None]:
    """Seconds to charge for a sample ``dt`` after the previous one, and the updated typical interval."""
    if dt <= 0:
        return 0.0, typical
    cap = MAX_GAP if typical is None else min(MAX_GAP, GAP_FACTOR * typical)
    if dt <= MAX_GAP:
        typical = dt if typical is None else 0.8 * typical + 0.2 * dt
    return min(dt, cap), typical


@dataclass(slots=True)
class GpuClock:
    """One GPU's newest sample time and typical sampling interval: what its next sample charges.

    A sample not newer than the last one is a replay or late: it charges nothing. Except when the clock
    stepped back (NTP correcting a clock that ran ahead): a replay arrives *later* than the original, but
    after a step back the receive time goes back with the sample's time. Then the GPU starts a new timeline:
    its first sample charges one typical interval (the real time since the previous one is unknown; at
    worst one interval is what a step can have cost) and the next ones their spacing as usual, so a
    10-minute step back neither stops GPU-hours for 10 minutes nor charges anything twice. Until the new
    timeline passes the newest time of the old one, a sample whose time is already stored (``stored``) is
    a replay of the old timeline. Only the store knows receive times and what is stored; other callers
    (the job tracker) pass neither and see a step back as late samples."""

    last: float | None = None
    typical: float | None = None
    last_received: float | None = None  # receive time of the newest sample: a step back or a replay?
    stepped_from: float | None = None  # after a step back: the newest time of the timeline it left

    def tick(self, ts: float, received: float | None = None,
             stored: Callable[[float], bool] | None = None) -> float | None:
        """Seconds a sample taken at ``ts`` (received at ``received``) charges (0 for the first), or None
        when it is a replay or late (its readings count, its time does not)."""
        last = self.last
        if last is not None and ts <= last:
            seen = self.last_received
            if received is None or seen is None or received >= seen or ts == last:
                return None
            self.stepped_from = max(last, self.stepped_from or last)
            self.last, self.last_received = ts, received
            return self.typical or 0.0
        if self.stepped_from is not None:
            if ts > self.stepped_from:
                self.stepped_from = None  # past the old timeline: nothing to mistake for a replay
            elif stored is not None and stored(ts):
                return None  # a replay of the timeline before the step
        self.last = ts
        if received is not None:
            self.last_received = received
        if last is None:
            return 0.0
        seconds, self.typical = credit(ts - last, self.typical)
        return seconds


@dataclass(slots=True)
class Charge:
    """What one GPU sample charges."""

    users: dict[str, Hours] = field(default_factory=dict)
    jobs: dict[str, Hours] = field(default_factory=dict)  # job key (model/jobkey.py) -> hours


def charge(host: str, gpu: GpuSample, seconds: float, waste: Collection[str], *,
           jobs: Mapping[int, str] | None = None) -> Charge:
    """The charges of one sample of ``gpu`` on ``host`` for ``seconds``: ``waste`` is the users whose holding
    is waste (classify.waste_of, as model/facts.py worked it out); ``jobs`` each process's job key by pid
    (the facts' keys; worked out here when not given)."""
    out = Charge()
    if seconds <= 0 or gpu.error is not None:
        return out
    util = gpu.util_gpu
    used = seconds * util / 100.0 if util is not None else 0.0
    job_waste: dict[str, bool] = {}
    for p in gpu.processes:
        if not holds_memory(p):
            continue
        user = user_of(p)
        wasting = user in waste
        out.users[user] = (seconds, used, seconds if wasting else 0.0)
        key = jobs[p.pid] if jobs is not None else job_key(host, p)
        job_waste[key] = job_waste.get(key, False) or wasting
    if out.users:
        out.jobs = {key: (seconds, used, seconds if wasting else 0.0) for key, wasting in job_waste.items()}
    return out


def allocation_charge(use: AllocationUse, seconds: Mapping[int, float]) -> dict[int, tuple[float, float]]:
    """GPU index -> (allocated, unused) seconds one snapshot charges a running Slurm job, for each GPU it
    holds that the snapshot charges time for (``seconds``: GPU index -> what its :class:`GpuClock` gave
    it)."""
    unused = set(use.unused)
    out: dict[int, tuple[float, float]] = {}
    for index in use.allocated:
        s = seconds.get(index)
        if s is not None and s > 0:
            out[index] = (s, s if index in unused else 0.0)
    return out
