"""Slurm job id -> name, user, account, partition, state and GPUs held here, resolved off the sampling path.

The cgroup gives only a job id (:mod:`procinfo`); people think in job names and accounts. ``scontrol`` can
take seconds (a busy or unreachable slurmctld) or hang, so it never runs on the sampler's thread: the
sampler asks :meth:`SlurmResolver.get`, which answers from a cache at once (what is known now, or None),
and queues an unknown or expired id for a background thread. That thread runs ``scontrol -o show job ID``
with a time bound, in its own session, and kills the whole process group of a hung call.

The same thread lists the jobs on this node every :data:`~gpufleet.agent.slurm_node.LIST_EVERY` seconds
(:class:`~gpufleet.agent.slurm_node.NodeJobs`) and looks them up too: a job that holds GPUs and runs no
process on them is known only to Slurm. :meth:`SlurmResolver.allocations` answers, from the cache, which
jobs hold which GPUs here.

Cache: a found job is kept :data:`FOUND_TTL` seconds (its state changes: re-read then, still showing the
old answer meanwhile); a failure (invalid id, timeout, error) is retried after :data:`RETRY_AFTER`; an id
the sampler has not asked about for :data:`FORGET_AFTER` is dropped. No binary, no resolver: a host
without Slurm pays nothing.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from gpufleet.agent.slurm_node import LIST_EVERY, NodeJobs, node_gpus, slurm_conf
from gpufleet.agent.wire import SlurmAllocation

log = logging.getLogger(__name__)

ENV_SCONTROL: Final = "GPUFLEET_SCONTROL"
FOUND_TTL: Final = 300.0
RETRY_AFTER: Final = 60.0
FORGET_AFTER: Final = 120.0
CALL_TIMEOUT: Final = 5.0
#: Longest value kept from scontrol (a job name is bounded by Slurm; a broken binary is not).
MAX_VALUE: Final = 200

#: ``Key=`` at the start of a record or after a space; Slurm keys are capitalised (``JobName``,
#: ``AllocNode:Sid``, ``CPUs/Task``, ``ReqB:S:C:T``). A job name with ``" x=y"`` in it stays one value.
_KEY: Final = re.compile(r"(?:^| )([A-Z][A-Za-z0-9_:/]*)=")
_INVALID: Final = "Invalid job id"
#: Job states in which a job holds no allocation (any other state, or none printed, counts as holding).
ENDED_STATES: Final = frozenset({"PENDING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                                 "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED",
                                 "REVOKED", "SPECIAL_EXIT"})


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What the agent reports about one Slurm job."""

    job_id: str
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None
    #: Slurm's GRES indexes of the GPUs the job holds on this node (``scontrol show job -d``); None: unknown
    gpus: tuple[int, ...] | None = None


class SlurmLookupError(Exception):
    """``scontrol`` did not answer about a job (hung, failed, unreadable output)."""


def parse_fields(line: str) -> dict[str, str]:
    """One ``scontrol -o`` record as key -> value; a value runs to the next `` Key=`` boundary.

    ``JobName`` is the one free-text field Slurm prints before ``UserId``: it runs to `` UserId=`` whatever
    it holds (spaces, ``=``, capitalised words)."""
    out: dict[str, str] = {}
    rest = line.strip()
    head = re.match(r"(.*?)JobName=(.*?) UserId=", rest)
    if head:
        out["JobName"] = head.group(2)
        rest = head.group(1) + "UserId=" + rest[head.end():]
    marks = list(_KEY.finditer(rest))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(rest)
        out.setdefault(m.group(1), rest[m.end():end])
    return out


def _value(fields: dict[str, str], key: str) -> str | None:
    v = fields.get(key)
    if v is None or v in ("", "(null)"):
        return None
    return v[:MAX_VALUE]


def parse_job(job_id: str, text: str, node: str | None = None) -> SlurmJob | None:
    """The job ``job_id`` from ``scontrol -o show job [-d]`` output (an array or het job prints several
    lines: the one with this JobId, else the first); None when no line is a job record. ``node``: the
    Slurm name of this node, whose GPUs ``-d`` details give (None: the host name)."""
    lines = [line for line in text.splitlines() if "JobId=" in line]
    if not lines:
        return None
    records = [parse_fields(line) for line in lines]
    at = next((i for i, r in enumerate(records) if r.get("JobId") == job_id), 0)
    fields = records[at]
    user = _value(fields, "UserId")
    if user is not None:
        user = user.partition("(")[0] or user  # "alice(1001)"
    gpus = node_gpus(lines[at], node)
    return SlurmJob(job_id, _value(fields, "JobName"), user, _value(fields, "Account"),
                    _value(fields, "Partition"), _value(fields, "JobState"),
                    None if gpus is None else tuple(gpus))


class Scontrol:
    """Runs ``scontrol -o show job -d ID`` (and the node's job listing), bounded; :meth:`cancel` kills a
    call in flight (agent exit). ``node``: this node's Slurm name (None: the host name)."""

    def __init__(self, binary: str, timeout: float = CALL_TIMEOUT, node: str | None = None) -> None:
        self.binary = binary
        self.timeout = timeout
        self.node = node
        self._running: subprocess.Popen[bytes] | None = None

    def _call(self, argv: list[str]) -> tuple[int, str, str]:
        """(exit status, stdout, stderr). Raises :class:`SlurmLookupError` when it cannot start or takes
        over the time bound (its process group is killed first: the command may have children)."""
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise SlurmLookupError(f"cannot run {argv[0]}: {exc}") from exc
        self._running = p
        try:
            out, err = p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            raise SlurmLookupError(
                f"{' '.join(argv[:5])} took over {self.timeout:g} s (killed)") from None
        finally:
            self._running = None
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def output(self, argv: list[str]) -> str:
        """A command's stdout; raises :class:`SlurmLookupError` unless it exits 0 in time."""
        code, out, err = self._call(argv)
        if code != 0:
            raise SlurmLookupError(f"{' '.join(argv[:5])} exited {code}: {err.strip()[:200]}")
        return out

    def __call__(self, job_id: str) -> SlurmJob | None:
        """The job, or None when Slurm says the id is invalid. Raises :class:`SlurmLookupError` on a
        timeout, another failure, or output that is not a job record."""
        binary = self.binary
        code, text, message = self._call([binary, "-o", "show", "job", "-d", job_id])
        if code != 0:
            if _INVALID in message or _INVALID in text:
                return None
            raise SlurmLookupError(
                f"{binary} show job {job_id} exited {code}: {message.strip()[:200]}")
        job = parse_job(job_id, text, self.node)
        if job is None:
            raise SlurmLookupError(f"{binary} show job {job_id}: no job record in its output")
        return job

    def cancel(self) -> None:
        p = self._running
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
    p.communicate()  # reap it and close the pipes


@dataclass(slots=True)
class _Entry:
    job: SlurmJob | None  # None: not known (yet, or the last lookup failed)
    expires: float  # when to look it up again
    seen: float  # the sampler last asked
    queued: bool = False


Lookup = Callable[[str], SlurmJob | None]
#: Lists the job ids on this node (:class:`~gpufleet.agent.slurm_node.NodeJobs`); raises SlurmLookupError.
Lister = Callable[[], set[str]]


class SlurmResolver:
    """A cache in front of ``scontrol``, filled by one background thread (see the module docstring).

    ``lookup``, ``lister`` and ``clock`` are parameters for tests; ``start=False`` leaves the thread to the
    test, which drives :meth:`work_once` and :meth:`list_once`."""

    def __init__(self, lookup: Lookup, *, lister: Lister | None = None, list_every: float = LIST_EVERY,
                 clock: Callable[[], float] = time.monotonic, start: bool = True) -> None:
        self._lookup = lookup
        self._lister = lister
        self.list_every = list_every
        self._clock = clock
        self._cache: dict[str, _Entry] = {}
        self._listed: frozenset[str] = frozenset()  # the jobs on this node at the last listing
        self._version = 0  # bumped whenever an answer or the listing changes (allocations' memo)
        self._memo: tuple[frozenset[str], int, list[SlurmAllocation]] = (frozenset(), -1, [])
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._list_warned = False
        self._stop = threading.Event()
        if start:
            self._thread = threading.Thread(target=self._run, name="gpufleet-slurm", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ sampling path (no blocking)

    def get(self, job_id: str) -> SlurmJob | None:
        """What is known about ``job_id`` now (an expired answer until the refresh lands); never blocks
        on Slurm: an unknown or expired id is queued for the background thread."""
        with self._lock:
            return self._touch(job_id, self._clock()).job

    def _touch(self, job_id: str, now: float) -> _Entry:
        """The entry of ``job_id``, marked seen and queued when unknown or expired (lock held)."""
        e = self._cache.get(job_id)
        if e is None:
            e = self._cache[job_id] = _Entry(None, now, now)
        e.seen = now
        if now >= e.expires and not e.queued:
            e.queued = True
            self._queue.put(job_id)
        return e

    def allocations(self, job_ids: Iterable[str] = ()) -> list[SlurmAllocation]:
        """Every job on this node (the last listing, and ``job_ids``: those of this sample's processes) that
        Slurm says holds GPUs here, as the wire carries it, ordered by job id. A cache read, built again only
        when the jobs or the answers changed (the objects are shared between snapshots: never mutate them).
        """
        with self._lock:
            wanted = self._listed.union(job_ids)
            key, version, memo = self._memo
            if version == self._version and key == wanted:
                return list(memo)
            jobs = [e.job for e in map(self._cache.get, wanted) if e is not None and e.job is not None]
            memo = [SlurmAllocation(job=j.job_id, gpu_indexes=list(j.gpus), name=j.name, user=j.user,
                                    account=j.account, partition=j.partition, state=j.state)
                    for j in sorted(jobs, key=lambda j: (len(j.job_id), j.job_id))
                    if j.gpus and j.state not in ENDED_STATES]
            self._memo = (wanted, self._version, memo)
            return list(memo)

    # ------------------------------------------------------------------ background thread

    def work_once(self, timeout: float | None = None) -> bool:
        """Take one queued id and look it up; False when nothing came within ``timeout``."""
        try:
            job_id = self._queue.get(timeout=timeout)
        except queue.Empty:
            return False
        if job_id is None:
            return False
        failed = False
        try:
            job, ttl = self._lookup(job_id), FOUND_TTL
            if job is None:
                ttl = RETRY_AFTER  # "Invalid job id specified": unknown until the retry
        except SlurmLookupError as exc:
            job, ttl, failed = None, RETRY_AFTER, True
            if not self._warned:
                self._warned = True
                log.warning("Slurm job names unavailable for now: %s (retrying every %g s)", exc, ttl)
            else:
                log.debug("%s", exc)
        now = self._clock()
        with self._lock:
            e = self._cache.get(job_id)
            if e is not None:
                if not failed and e.job != job:  # a failed refresh keeps the last answer: slurmctld down
                    e.job = job  # ends no job
                    self._version += 1
                e.expires, e.queued = now + ttl, False
        return True

    def list_once(self) -> bool:
        """List the jobs on this node and queue the unknown ones; False when the listing failed (the last
        listing stands: slurmctld down ends no job)."""
        if self._lister is None:
            return False
        try:
            ids = self._lister()
        except SlurmLookupError as exc:
            if not self._list_warned:
                self._list_warned = True
                log.warning("cannot list the Slurm jobs on this node: %s (retrying every %g s)", exc,
                            self.list_every)
            else:
                log.debug("%s", exc)
            return False
        now = self._clock()
        with self._lock:
            self._listed = frozenset(ids)  # compared by value in allocations(): no version bump needed
            for job_id in sorted(ids):
                self._touch(job_id, now)
        return True

    def forget_unseen(self) -> None:
        """Drop ids the sampler has not asked about for :data:`FORGET_AFTER` (jobs that ended)."""
        now = self._clock()
        with self._lock:
            for job_id in [k for k, e in self._cache.items() if now - e.seen > FORGET_AFTER]:
                del self._cache[job_id]
                self._version += 1

    def _run(self) -> None:
        next_list = time.monotonic()
        while not self._stop.is_set():
            if self._lister is not None and time.monotonic() >= next_list:
                self.list_once()
                next_list = time.monotonic() + self.list_every
            wait = FORGET_AFTER / 4
            if self._lister is not None:
                wait = min(wait, max(0.0, next_list - time.monotonic()))
            self.work_once(timeout=wait)
            self.forget_unseen()

    def close(self) -> None:
        """Stop the thread, killing a call in flight."""
        if self._thread is not None:
            self._stop.set()
            self._queue.put(None)
            cancel = getattr(self._lookup, "cancel", None)
            if cancel is not None:
                cancel()  # a hung scontrol must not hold up the agent's exit
            self._thread.join(CALL_TIMEOUT + 1.0)
            self._thread = None

    def cached(self) -> dict[str, SlurmJob | None]:
        """The cache's answers (tests, debugging)."""
        with self._lock:
            return {k: e.job for k, e in self._cache.items()}


def find_scontrol(option: str | None, *, explicit_only: bool = False) -> str | None:
    """The scontrol to run: ``--scontrol``, else ``$GPUFLEET_SCONTROL``, else ``scontrol`` on PATH (unless
    ``explicit_only``: the fake backend's job ids mean nothing to a real Slurm). Empty: off. None: no
    Slurm here."""
    chosen = option if option is not None else os.environ.get(ENV_SCONTROL)
    if chosen is None:
        if explicit_only:
            return None
        chosen = "scontrol"
    if not chosen:
        return None
    return shutil.which(chosen)


def resolver_for(binary: str | None, *, node: str | None = None, cgroup_root: str | None = None,
                 list_every: float | None = None) -> SlurmResolver | None:
    """A started resolver for ``binary``, or None (no Slurm on this host: silently off).

    ``cgroup_root`` (the real backend: ``/sys/fs/cgroup``) also lists the jobs on this node, so those that
    run no GPU process are known too; with ``squeue`` beside ``binary`` as the fallback where there is no
    Slurm cgroup tree and Slurm is configured here. The fake backend passes None: its job ids mean nothing
    to this host's cgroups."""
    if binary is None:
        return None
    scontrol = Scontrol(binary, node=node)
    lister = None
    if cgroup_root is not None:
        squeue = shutil.which("squeue", path=os.path.dirname(binary)) if slurm_conf(binary) else None
        lister = NodeJobs(scontrol.output, squeue, node, cgroup_root)
    return SlurmResolver(scontrol, lister=lister, list_every=LIST_EVERY if list_every is None else list_every)
