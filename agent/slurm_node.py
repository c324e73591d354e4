"""Which GPUs Slurm gave each job on this node, and which jobs are on this node at all.

A job that holds GPUs and never touches one has no process on them: NVML cannot show it, only Slurm can.
Two facts are needed, both read off the sampling path (by :class:`gpufleet.agent.slurm.SlurmResolver`'s
thread):

- **What a job holds here**: ``scontrol -o show job -d ID`` prints one group per set of nodes with the same
  allocation, ``Nodes=<hostlist> CPU_IDs=<ids> Mem=<MB> GRES=<details>`` (SchedMD/slurm
  ``src/api/job_info.c``, ``slurm_sprint_job_info``), where the details are one
  ``name[:type]:count(IDX:<bitmap>)`` per GRES (``src/slurmctld/gres_ctld.c`` ``gres_ctld_job_build_details``
  in 22.05 and 23.x, ``src/stepmgr/gres_stepmgr.c`` ``gres_stepmgr_job_build_details`` later),
  ``name[:type](CNT:n)`` when Slurm kept no bitmap, and ``name:count(a/b,...)`` for shared GRES (shard, mps)
  in later releases. Older releases print
  ``GRES_IDX=gpu(IDX:1-4)``. The bitmap is Slurm's ``bit_fmt``: ``0-1``, ``0,2``, ``0-1,3``. The indexes are
  Slurm's GRES indexes on that node (the order of the GPUs in gres.conf's ``File=`` list, or of the devices
  AutoDetect found), not necessarily NVML's.
- **Which jobs are here**: every job with a step on this node has a cgroup (proctrack/cgroup, task/cgroup):
  cgroup v1 ``<root>/<controller>/slurm[_<node>]/uid_<uid>/job_<id>``, cgroup v2
  ``<root>/system.slice/[<node>_]slurmstepd.scope/job_<id>``. Listing those directories costs a few
  ``readdir`` calls and nothing on slurmctld. Only where no Slurm cgroup tree exists (proctrack/pgid or
  linuxproc) does the agent ask the controller, with ``squeue -h -w <node> -t R,S,CG -o %A``: squeue loads
  the controller's whole job table per call, so it runs at most every :data:`LIST_EVERY` seconds, and
  only where a slurm.conf is found (:func:`slurm_conf`): an unconfigured client looks for its controller
  in DNS SRV records, on every call.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

#: Seconds between two listings of the jobs on this node (a job started since shows up at most this late).
LIST_EVERY: Final = 30.0
#: Largest GRES index accepted from Slurm (a node with more GPUs than this is not a node).
MAX_INDEX: Final = 4095

#: One allocation group: ``Nodes=<hostlist> CPU_IDs=...`` up to the next group. The GRES key is matched
#: apart, inside the group (``GRES=`` since 20.x, ``GRES_IDX=`` before).
_GROUP: Final = re.compile(r"(?:^|\s)Nodes=(\S+) CPU_IDs=")
_GRES_KEY: Final = re.compile(r"\sGRES(?:_IDX)?=(\S*)")
#: One GRES entry of a group: ``gpu:2(IDX:0-1)``, ``gpu:a100:2(IDX:0,2)``, ``gpu(IDX:0)``, ``gpu(CNT:2)``.
_ENTRY: Final = re.compile(r"([^,():]+)((?::[^,():]+)*)\(([^)]*)\)")
_JOB_DIR: Final = re.compile(r"job_(\d+)$")


class SlurmParseError(ValueError):
    """Slurm printed something this parser does not understand (the message quotes it)."""


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's hostlist syntax: ``gpu[01-03,07],login1`` -> ``gpu01 gpu02 gpu03 gpu07 login1`` (zero padding
    kept, several bracket groups multiply out)."""
    names: list[str] = []
    for part in _split_top(expr):
        m = re.search(r"\[([^\[\]]*)\]", part)
        if m is None:
            names.append(part)
            continue
        head, tail = part[:m.start()], part[m.end():]
        for piece in m.group(1).split(","):
            lo, _, hi = piece.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise SlurmParseError(f"bad hostlist range {piece!r} in {expr!r}")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                names.extend(expand_hostlist(f"{head}{n:0{width}d}{tail}"))
    return names


def _split_top(expr: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(expr[start:i])
            start = i + 1
    out.append(expr[start:])
    return [p for p in out if p]


def parse_bitmap(text: str) -> list[int]:
    """Slurm's ``bit_fmt`` text: ``0-1,3`` -> [0, 1, 3]."""
    out: list[int] = []
    for piece in text.split(","):
        lo, _, hi = piece.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise SlurmParseError(f"bad index list {text!r}")
        first, last = int(lo), int(hi or lo)
        if last < first or last > MAX_INDEX:
            raise SlurmParseError(f"index range {piece!r} out of 0..{MAX_INDEX}")
        out.extend(range(first, last + 1))
    return sorted(set(out))


def gpu_indexes(gres: str) -> list[int] | None:
    """The GPU indexes of one group's GRES details; [] when it holds no GPU; None when it holds GPUs but
    Slurm printed no indexes for them (``gpu(CNT:2)``)."""
    out: set[int] = set()
    unknown = False
    for m in _ENTRY.finditer(gres):
        if m.group(1) != "gpu":
            continue  # shard, mps, nic, ... are not whole GPUs
        detail = m.group(3)
        if detail.startswith("IDX:"):
            if detail[4:] not in ("", "N/A"):
                out.update(parse_bitmap(detail[4:]))
        else:
            unknown = True
    if unknown and not out:
        return None
    return sorted(out)


def allocation_groups(record: str) -> list[tuple[str, str]]:
    """(hostlist, GRES details) per ``Nodes=`` group of one ``scontrol -o show job -d`` record.

    Only the part between ``UserId=`` and ``MinCPUsNode=`` is read: the free text a user controls (job name
    before it, comment, command and paths after it) cannot forge a group."""
    start = record.find(" UserId=")
    end = record.find(" MinCPUsNode=", max(start, 0))
    part = record[max(start, 0):end if end >= 0 else len(record)]
    marks = list(_GROUP.finditer(part))
    groups = []
    for i, m in enumerate(marks):
        body = part[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(part)]
        g = _GRES_KEY.search(body)
        groups.append((m.group(1), g.group(1) if g else ""))
    return groups


def node_gpus(record: str, node: str | None) -> list[int] | None:
    """The GPU indexes the job holds on ``node`` (None: this node's name, from the host name).

    A job seen on this node whose groups do not name it (a NodeName that is not the host name) is still
    resolved when all its groups hold the same GPUs; otherwise None (unknown), as for ``CNT`` details or a
    record without ``-d`` details."""
    groups = allocation_groups(record)
    if not groups:
        return None
    name = node if node is not None else socket.gethostname().split(".")[0]
    for hosts, gres in groups:
        try:
            if name in expand_hostlist(hosts):
                return gpu_indexes(gres)
        except SlurmParseError:
            continue
    if len({gres for _, gres in groups}) == 1:
        return gpu_indexes(groups[0][1])
    return None


# ------------------------------------------------------------------------------------ jobs on this node


def cgroup_bases(root: Path, node: str | None) -> list[Path]:
    """The directories under which Slurm puts this node's jobs (empty: no Slurm cgroup tree here).

    ``slurm_<node>`` is the multiple-slurmd layout (Debian's build); with ``node`` given only that node's
    is taken, so a second slurmd on the host (a test cluster) is not mistaken for this one."""
    v1 = [p for p in root.glob("*/slurm*") if p.name == "slurm" or p.name.startswith("slurm_")]
    if node is not None:
        v1 = [p for p in v1 if p.name in ("slurm", f"slurm_{node}")]
    scopes = [*root.glob("system.slice/*slurmstepd.scope"), *root.glob("*/system.slice/*slurmstepd.scope")]
    v2 = [p for p in scopes if node is None or p.name in ("slurmstepd.scope", f"{node}_slurmstepd.scope")]
    return sorted(p for p in v1 + v2 if p.is_dir())


def cgroup_jobs(bases: list[Path]) -> set[str]:
    """Job ids with a cgroup under ``bases`` (``uid_*/job_*`` on v1, ``job_*`` on v2)."""
    ids: set[str] = set()
    for base in bases:
        try:
            for d in [*base.glob("uid_*/job_*"), *base.glob("job_*")]:
                m = _JOB_DIR.match(d.name)
                if m:
                    ids.add(m.group(1))
        except OSError:
            continue  # a directory that vanished mid-listing (a job ending)
    return ids


def slurm_conf(binary: str) -> Path | None:
    """The slurm.conf a Slurm client beside ``binary`` reads, if any: ``$SLURM_CONF``, the distributions'
    ``/etc/slurm``, ``/etc/slurm-llnl``, configless slurmd's ``/run/slurm/conf``, or ``<prefix>/etc`` of
    ``<prefix>/bin/scontrol``."""
    candidates = [os.environ.get("SLURM_CONF"), "/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf",
                  "/run/slurm/conf/slurm.conf",
                  str(Path(binary).resolve().parent.parent / "etc" / "slurm.conf")]
    return next((Path(c) for c in candidates if c and os.path.isfile(c)), None)


Run = Callable[[list[str]], str]


class NodeJobs:
    """Lists the jobs on this node: from the cgroup tree, else (no tree) with ``squeue``.

    ``run`` runs a command and returns its stdout, raising on failure or timeout (the resolver's bounded
    runner, which the agent's exit can cancel)."""

    def __init__(self, run: Run, squeue: str | None, node: str | None,
                 cgroup_root: str | Path = "/sys/fs/cgroup") -> None:
        self._run = run
        self.squeue = squeue
        self.node = node
        self.root = Path(cgroup_root)
        self.source: str | None = None  # "cgroup" or "squeue": what answered last (logs, tests)

    def __call__(self) -> set[str]:
        bases = cgroup_bases(self.root, self.node)
        if bases or self.squeue is None:
            self.source = "cgroup"
            return cgroup_jobs(bases)
        self.source = "squeue"
        node = self.node if self.node is not None else socket.gethostname().split(".")[0]
        out = self._run([self.squeue, "-h", "-w", node, "-t", "R,S,CG", "-o", "%A"])
        return {line.strip() for line in out.splitlines() if line.strip().isdigit()}
