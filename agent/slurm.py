"""Slurm job id -> name, user, account, partition, state, resolved off the sampling path.

The cgroup gives only a job id (:mod:`procinfo`); people think in job names and accounts. ``scontrol`` can
take seconds (a busy or unreachable slurmctld) or hang, so it never runs on the sampler's thread: the
sampler asks :meth:`SlurmResolver.get`, which answers from a cache at once (what is known now, or None),
and queues an unknown or expired id for a background thread. That thread runs ``scontrol -o show job ID``
with a time bound, in its own session, and kills the whole process group of a hung call.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

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


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What the agent reports about one Slurm job."""

    job_id: str
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None


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


def parse_job(job_id: str, text: str) -> SlurmJob | None:
    """The job ``job_id`` from ``scontrol -o show job`` output (an array or het job prints several lines:
    the one with this JobId, else the first); None when no line is a job record."""
    records = [parse_fields(line) for line in text.splitlines() if "JobId=" in line]
    if not records:
        return None
    fields = next((r for r in records if r.get("JobId") == job_id), records[0])
    user = _value(fields, "UserId")
    if user is not None:
        user = user.partition("(")[0] or user  # "alice(1001)"
    return SlurmJob(job_id, _value(fields, "JobName"), user, _value(fields, "Account"),
                    _value(fields, "Partition"), _value(fields, "JobState"))


class Scontrol:
    """Runs ``scontrol -o show job ID``, bounded; :meth:`cancel` kills a call in flight (agent exit)."""

    def __init__(self, binary: str, timeout: float = CALL_TIMEOUT) -> None:
        self.binary = binary
        self.timeout = timeout
        self._running: subprocess.Popen[bytes] | None = None

    def __call__(self, job_id: str) -> SlurmJob | None:
        """The job, or None when Slurm says the id is invalid. Raises :class:`SlurmLookupError` on a
        timeout (the process group is killed first: scontrol may have children), another failure, or
        output that is not a job record."""
        binary = self.binary
        try:
            p = subprocess.Popen([binary, "-o", "show", "job", job_id], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise SlurmLookupError(f"cannot run {binary}: {exc}") from exc
        self._running = p
        try:
            out, err = p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            raise SlurmLookupError(
                f"{binary} show job {job_id} took over {self.timeout:g} s (killed)") from None
        finally:
            self._running = None
        text, message = out.decode(errors="replace"), err.decode(errors="replace")
        if p.returncode != 0:
            if _INVALID in message or _INVALID in text:
                return None
            raise SlurmLookupError(
                f"{binary} show job {job_id} exited {p.returncode}: {message.strip()[:200]}")
        job = parse_job(job_id, text)
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


class SlurmResolver:
    """A cache in front of ``scontrol``, filled by one background thread (see the module docstring).

    ``lookup`` and ``clock`` are parameters for tests; ``start=False`` leaves the thread to the test, which
    drives :meth:`work_once`."""

    def __init__(self, lookup: Lookup, *, clock: Callable[[], float] = time.monotonic,
                 start: bool = True) -> None:
        self._lookup = lookup
        self._clock = clock
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._stop = threading.Event()
        if start:
            self._thread = threading.Thread(target=self._run, name="gpufleet-slurm", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ sampling path (no blocking)

    def get(self, job_id: str) -> SlurmJob | None:
        """What is known about ``job_id`` now (an expired answer until the refresh lands); never blocks
        on Slurm: an unknown or expired id is queued for the background thread."""
        now = self._clock()
        with self._lock:
            e = self._cache.get(job_id)
            if e is None:
                e = self._cache[job_id] = _Entry(None, now, now)
            e.seen = now
            if now >= e.expires and not e.queued:
                e.queued = True
                self._queue.put(job_id)
            return e.job

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
                if not failed:  # a failed refresh keeps the last answer: slurmctld down ends no job
                    e.job = job
                e.expires, e.queued = now + ttl, False
        return True

    def forget_unseen(self) -> None:
        """Drop ids the sampler has not asked about for :data:`FORGET_AFTER` (jobs that ended)."""
        now = self._clock()
        with self._lock:
            for job_id in [k for k, e in self._cache.items() if now - e.seen > FORGET_AFTER]:
                del self._cache[job_id]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.work_once(timeout=FORGET_AFTER / 4)
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


def resolver_for(binary: str | None) -> SlurmResolver | None:
    """A started resolver for ``binary``, or None (no Slurm on this host: silently off)."""
    if binary is None:
        return None
    return SlurmResolver(Scontrol(binary))
