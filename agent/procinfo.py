"""Process attribution from /proc: who owns a GPU process, what it runs, since when, in which container/job.

NVML gives only a pid. Everything people act on (user, command, running time, zombie state, container,
Slurm job) comes from /proc. Two things are normal and never errors: a process that exits between NVML
listing it and /proc being read ("missing"), and an entry we may not read because of hidepid or
permissions ("denied"). Both are reported as *unattributed*, never as dead.

The root is a parameter so tests can build a fake /proc tree.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from gpufleet.agent.k8s import KubeletLogs
from gpufleet.agent.redact import Redactor

Status = Literal["ok", "denied", "missing"]

#: Longest command line reported (a frame must stay far below the 1 MiB line bound).
MAX_COMMAND = 4096

_CONTAINER_RE = re.compile(
    r"(?:docker-|crio-|cri-containerd-|containerd-|libpod-|conmon-)?([0-9a-f]{64})(?:\.scope)?$"
)
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_SLURM_RE = re.compile(r"(?:^|/)job_(\d+)(?:/|$)")


@dataclass(slots=True)
class ProcInfo:
    pid: int
    status: Status = "ok"
    user: str | None = None
    uid: int | None = None
    command: str | None = None
    start_time: float | None = None  # unix seconds
    state: str | None = None  # R S D Z T ...
    ppid: int | None = None
    container: str | None = None
    pod: str | None = None
    job: str | None = None
    pod_namespace: str | None = None  # Kubernetes names of ``pod``/``container`` (agent/k8s.py)
    pod_name: str | None = None
    container_name: str | None = None

    @property
    def attributed(self) -> bool:
        return self.status == "ok"


class ProcSource(Protocol):
    """Answers "who is pid N" — the real /proc reader or the fake backend's scenario table."""

    def lookup(self, pid: int) -> ProcInfo: ...

    def hides_pids(self) -> bool:
        """True when missing pids may just be hidden (hidepid), not in another PID namespace."""
        ...

    def forget(self, live_pids: set[int]) -> None:
        """Drop whatever is cached about pids not in ``live_pids``."""
        ...


@dataclass(slots=True)
class CgroupInfo:
    container: str | None = None
    pod: str | None = None
    job: str | None = None


def parse_cgroup(text: str) -> CgroupInfo:
    """Container id (docker/containerd/cri-o/podman 64-hex), Kubernetes pod uid, Slurm job id."""
    info = CgroupInfo()
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for segment in path.split("/"):
            m = _CONTAINER_RE.search(segment)
            if m and info.container is None:
                info.container = m.group(1)
        if info.pod is None and "kubepods" in path:
            pm = _POD_RE.search(path)
            if pm:
                info.pod = pm.group(1).replace("_", "-")
        if info.job is None:
            jm = _SLURM_RE.search(path)
            if jm:
                info.job = jm.group(1)
    return info


def _read_small(path: str) -> str:
    """A small /proc file's whole text. Bytes that are not UTF-8 (a process may name itself anything, a
    cgroup path may hold anything) read as replacement characters: the process is still attributed."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 4096)]
        # /proc answers a small file in one read: a read shorter than asked for is the end (so is the empty
        # read after a longer file), without one more read to find out (each GPU process's stat, each sample)
        while len(chunks[-1]) == 4096:
            chunks.append(os.read(fd, 4096))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def parse_stat(text: str) -> tuple[str, str, int, int]:
    """(comm, state, ppid, starttime in clock ticks) from /proc/<pid>/stat; comm may hold spaces and ')'."""
    left, _, rest = text.rpartition(")")
    comm = left.partition("(")[2]
    fields = rest.split()
    # fields[0] is field 3 (state) of proc(5); starttime is field 22
    return comm, fields[0], int(fields[1]), int(fields[19])


def parse_status_uid(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            # real uid; a malformed line (a fake /proc, a kernel oddity) means unknown, never a crash
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


class ProcReader:
    """Reads /proc (or a tree shaped like it). Static facts are cached per (pid, start time).

    ``pods`` (optional) names a Kubernetes process's pod and container; a process first seen before the
    kubelet's directories named it is asked about again (the resolver bounds how often it looks)."""

    def __init__(self, root: str | os.PathLike[str] = "/proc", redactor: Redactor | None = None,
                 pods: KubeletLogs | None = None) -> None:
        self.root = Path(root)
        self.pods = pods
        self._root = str(self.root)
        self.redactor = redactor if redactor is not None else Redactor()  # secrets never leave the host
        self._btime: float | None = None
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._users: dict[int, str] = {}
        self._cache: dict[tuple[int, int], ProcInfo] = {}
        self._hidepid: bool | None = None

    def boot_time(self) -> float:
        if self._btime is None:
            for line in (self.root / "stat").read_text().splitlines():
                if line.startswith("btime"):
                    self._btime = float(line.split()[1])
                    break
            else:
                self._btime = 0.0
        return self._btime

    def user_name(self, uid: int) -> str:
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    def hides_pids(self) -> bool:
        """Whether this /proc is mounted with hidepid (other users' pids invisible to us)."""
        if self._hidepid is None:
            self._hidepid = False
            try:
                for line in (self.root / "self" / "mountinfo").read_text().splitlines():
                    parts = line.split(" - ")
                    if len(parts) == 2 and parts[1].startswith("proc ") and "hidepid=" in parts[1]:
                        opts = parts[1].split()[-1]
                        if "hidepid=0" not in opts and "hidepid=off" not in opts:
                            self._hidepid = True
            except OSError:
                pass
        return self._hidepid

    def lookup(self, pid: int) -> ProcInfo:
        # every GPU process, every sample: a string path, not pathlib (a third of the lookup's time went to
        # building Path objects), and os.read, not open() (a file object costs twice the read itself)
        base = f"{self._root}/{pid}"
        try:
            comm, state, ppid, start_ticks = parse_stat(_read_small(f"{base}/stat"))
        except FileNotFoundError:
            return ProcInfo(pid, status="missing")
        except PermissionError:
            return ProcInfo(pid, status="denied")
        except (OSError, ValueError, IndexError):
            # an entry that exists but is unreadable or half torn down: unattributed, not dead
            return ProcInfo(pid, status="denied" if os.path.exists(base) else "missing")

        cached = self._cache.get((pid, start_ticks))
        if cached is not None:
            cached.state = state
            cached.ppid = ppid
            if cached.pod is not None and self.pods is not None and (
                    cached.pod_name is None or (cached.container_name is None and cached.container)):
                self._name_pod(cached)
            return cached
        info = self._read_static(pid, base, comm, start_ticks)
        if info.status != "ok":
            return info
        info.state, info.ppid = state, ppid
        if info.pod is not None and self.pods is not None:
            self._name_pod(info)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[(pid, start_ticks)] = info
        return info

    def _name_pod(self, info: ProcInfo) -> None:
        assert self.pods is not None
        names = self.pods.names(info.pod, info.container)
        if names is not None:
            info.pod_namespace, info.pod_name = names.namespace, names.pod
            info.container_name = names.container

    def _read_static(self, pid: int, base: str, comm: str, start_ticks: int) -> ProcInfo:
        try:
            uid = parse_status_uid(_read_small(f"{base}/status"))
        except FileNotFoundError:
            return ProcInfo(pid, status="missing")
        except OSError:
            return ProcInfo(pid, status="denied")
        command = comm
        try:
            with open(f"{base}/cmdline", "rb") as f:
                raw = f.read()
            args = self.redactor.args([a.decode(errors="replace") for a in raw.split(b"\0") if a])
            if args:
                command = " ".join(args)[:MAX_COMMAND]
        except OSError:
            pass
        cg = CgroupInfo()
        try:
            cg = parse_cgroup(_read_small(f"{base}/cgroup"))
        except OSError:
            pass
        try:
            start = self.boot_time() + start_ticks / self._ticks
        except OSError:
            start = None
        return ProcInfo(
            pid,
            user=None if uid is None else self.user_name(uid),
            uid=uid,
            command=command,
            start_time=start,
            container=cg.container,
            pod=cg.pod,
            job=cg.job,
        )

    def forget(self, live_pids: set[int]) -> None:
        """Drop cache entries of pids no longer on any GPU."""
        for key in [k for k in self._cache if k[0] not in live_pids]:
            del self._cache[key]
