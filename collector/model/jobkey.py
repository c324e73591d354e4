"""Which job a GPU process belongs to: the one definition the rules (idle_peers) and the per-job efficiency
records (collector/fleet/jobs.py) share, so an alert and a job record name a job alike.

- *job* (a record's identity): the Slurm job id (one job across hosts), else the container (one host), else
  the process itself (pid and start time: a pid is reused, its start time tells the two apart).
- *group* (who should compute together, for ``idle_peers``): the job's Slurm id or container, else the
  processes one launcher (torchrun, mpirun, deepspeed) started on a host: same parent and the same command
  once digits are dropped (ranks differ only in ``--rank N``). Two notebook kernels of one Jupyter server
  share a parent but not a command (each names its own kernel file), so they are not a group.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from typing import Any

_DIGITS = re.compile(r"\d+")
#: the prefix of a Slurm job's key (``slurm:90210``): one job across hosts
SLURM = "slurm:"
#: Parents that are not a launcher: init (the session is gone) or unknown.
_NO_LAUNCHER = (None, 0, 1)


def job_key(host: str, p: Any) -> str:
    """``slurm:90210``, ``container:<12 hex>@host`` or ``pid:4242.1701590000@host``; :func:`group_key` adds
    ``launcher:<ppid>@host:<8 hex>``."""
    if getattr(p, "job", None):
        return f"{SLURM}{p.job}"
    if getattr(p, "container", None):
        return f"container:{str(p.container)[:12]}@{host}"
    start = getattr(p, "start_time", None)
    return f"pid:{p.pid}.{'?' if start is None else f'{start:.0f}'}@{host}"


def group_key(host: str, p: Any) -> str:
    """The job key, with processes of one launcher (same parent, same command but digits) grouped."""
    return keys(host, p)[1]


def keys(host: str, p: Any) -> tuple[str, str]:
    """(:func:`job_key`, :func:`group_key`) of a process, the job key worked out once for both."""
    job = job_key(host, p)
    if getattr(p, "job", None) or getattr(p, "container", None):
        return job, job
    ppid = getattr(p, "ppid", None)
    if ppid in _NO_LAUNCHER:
        return job, job
    return job, _launcher_key(host, ppid, getattr(p, "command", None) or "")


@lru_cache(maxsize=8192)  # the same processes recur every sample
def _launcher_key(host: str, ppid: int, command: str) -> str:
    # the command (digits dropped) only tells launches of one parent apart: a short hash of it will do
    return f"launcher:{ppid}@{host}:{zlib.crc32(_DIGITS.sub('#', command).encode()):08x}"


def job_label(key: str) -> str:
    """The short name a person reads: ``90210``, the container id, ``pid 4242`` or ``launcher 5100``."""
    kind, _, rest = key.partition(":")
    if kind == "slurm":
        return f"job {rest}"
    if kind == "container":
        return f"container {rest.split('@')[0]}"
    if kind == "launcher":
        return f"launcher pid {rest.split('@')[0]}"
    return f"pid {rest.split('.')[0]}"
