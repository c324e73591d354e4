"""A real single-node Slurm cluster for tests: Debian's munged, slurmctld and slurmd on 127.0.0.1 only.

Why real daemons: the agent reads what Slurm itself leaves on a node (the job's cgroup, ``scontrol -o show
job -d`` text with its GRES indexes). A stand-in can only repeat what its author believed Slurm prints.

Layout: everything lives in one temporary directory (munge key, socket and seed; slurm.conf, gres.conf,
cgroup.conf; state and spool dirs; logs; four character devices made with mknod that gres.conf lists
with ``AutoDetect=off``). The daemons run in the foreground as children of the test process (``-F``/``-D``),
so teardown knows their pids. Nothing listens beyond 127.0.0.1 (``SlurmctldHost=<host>(127.0.0.1)``,
``NodeAddr=127.0.0.1``), and the ports are free ones picked at start.

Each cluster names its node ``gft<random>`` and numbers its jobs from a random ``FirstJobId``, so two test
runs on one host never share a job's cgroup (proctrack/cgroup puts a job under
``/sys/fs/cgroup/freezer/slurm_<node>/uid_<uid>/job_<id>`` on cgroup v1).

Every wait is bounded; :meth:`SlurmCluster.stop` cancels the jobs, stops the daemons (by pid), kills any
process left in the cluster's own cgroups (by pid) and removes the temporary directory.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

BINARIES: Final = ("munged", "slurmctld", "slurmd", "slurmstepd", "scontrol", "sbatch", "scancel", "squeue")
GPUS: Final = 4
NVIDIA_MAJOR: Final = 195  # /dev/nvidia<N> are character devices 195:N
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
START_TIMEOUT: Final = 30.0
CALL_TIMEOUT: Final = 15.0


class SlurmClusterError(Exception):
    """The cluster did not come up (or a Slurm command failed); the message carries the daemons' logs."""


def skip_reason() -> str | None:
    """Why a real cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real Slurm cluster needs root (slurmd runs jobs as their users, mknod, cgroups)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (f"Slurm/munge binaries missing: {', '.join(missing)} "
                "(apt-get install slurmctld slurmd munge slurm-client)")
    if cgroup_version() is None:
        return f"no usable cgroup hierarchy at {CGROUP_ROOT} (proctrack/cgroup needs one)"
    return None


def cgroup_version() -> int | None:
    """1 (a tmpfs of per-controller mounts, freezer among them), 2 (one cgroup2 mount), or None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    types = {parts[1]: parts[2] for parts in (m.split() for m in mounts) if len(parts) > 2}
    top = types.get(str(CGROUP_ROOT))
    if top == "cgroup2":
        return 2
    if top == "tmpfs" and types.get(str(CGROUP_ROOT / "freezer")) == "cgroup":
        return 1
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], timeout: float, logs: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise SlurmClusterError(f"{what}: not within {timeout:g} s\n{logs()}")


@dataclass
class SlurmCluster:
    """A running cluster. Run Slurm's own commands with :meth:`run` (it sets ``SLURM_CONF``)."""

    root: Path
    node: str
    conf: Path
    munge_socket: Path
    devices: list[Path]
    first_job_id: int
    cgroup: int
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """The environment for a Slurm client (scontrol, sbatch, the agent): this cluster's slurm.conf."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = CALL_TIMEOUT, check: bool = True) -> str:
        """A Slurm command's stdout; a failure raises with its stderr and the daemons' logs."""
        try:
            p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise SlurmClusterError(f"{' '.join(argv)}: no answer in {timeout:g} s\n{self.logs()}") from None
        if check and p.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}\n{self.logs()}")
        return p.stdout

    def logs(self, tail: int = 30) -> str:
        out = []
        for name in ("munged", "slurmctld", "slurmd"):
            path = self.root / "log" / f"{name}.log"
            try:
                lines = path.read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                lines = ["(no log)"]
            out.append(f"--- {path}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---------------------------------------------------------------------------------------------- jobs

    def sbatch(self, *args: str) -> str:
        """Submit a batch job to this node (working directory and output in the cluster's own directory);
        its id."""
        out = self.run("sbatch", "--parsable", "-w", self.node, "-D", str(self.root / "jobs"), *args).strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> str:
        """``scontrol -o show job -d ID`` as Slurm prints it."""
        return self.run("scontrol", "-o", "show", "job", "-d", job_id)

    def job_state(self, job_id: str) -> str | None:
        for word in self.job(job_id).split():
            if word.startswith("JobState="):
                return word.partition("=")[2]
        return None

    def wait_state(self, job_id: str, state: str, timeout: float = START_TIMEOUT) -> None:
        _wait(f"job {job_id} state {state}", lambda: self.job_state(job_id) == state, timeout,
              lambda: f"job: {self.job(job_id)}\n{self.logs()}")

    def job_pids(self, job_id: str) -> list[int]:
        """The pids of the job's steps on this node (``scontrol listpids``, which asks the node's stepds);
        none while slurmd has not started the job's first step ("does not exist on node": RUNNING comes
        first)."""
        out = self.run("scontrol", "listpids", job_id, self.node, check=False)
        pids = []
        for line in out.splitlines()[1:]:  # "PID JOBID STEPID LOCALID GLOBALID"
            fields = line.split()
            if fields and fields[0].isdigit():
                pids.append(int(fields[0]))
        return pids

    def wait_pid(self, job_id: str, comm: str, timeout: float = START_TIMEOUT) -> int:
        """The pid of the job's process named ``comm`` (once slurmstepd has started it)."""
        found: list[int] = []

        def check() -> bool:
            for pid in self.job_pids(job_id):
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                        found.append(pid)
                        return True
                except OSError:
                    continue
            return False

        _wait(f"job {job_id} process {comm}", check, timeout, self.logs)
        return found[0]

    def cancel_all(self, timeout: float = START_TIMEOUT) -> None:
        """Cancel every job and wait until Slurm lists none (bounded)."""
        self.run("scancel", "--full", "-w", self.node, check=False)
        _wait("every job ended", lambda: not self.run("squeue", "-h", "-o", "%A", check=False).strip(),
              timeout, self.logs)

    # ------------------------------------------------------------------------------------------ teardown

    def cgroup_dirs(self) -> list[Path]:
        """This cluster's own cgroup directories (cgroup v1: one per controller that Slurm used)."""
        if self.cgroup == 1:
            return sorted(CGROUP_ROOT.glob(f"*/slurm_{self.node}"))
        return sorted(CGROUP_ROOT.glob(f"system.slice/{self.node}_slurmstepd.scope"))

    def stop(self) -> None:
        """Cancel jobs, stop the daemons, kill what is left in this cluster's cgroups, remove its files."""
        try:
            if self.daemons.get("slurmctld") is not None and self.daemons["slurmctld"].poll() is None:
                self.cancel_all(timeout=15)
        except SlurmClusterError:
            pass  # killed below, by pid
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.daemons.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        for pid in _pids_in(self.cgroup_dirs()):  # slurmstepd and job processes the daemons left
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _remove_cgroups(self.cgroup_dirs())
        shutil.rmtree(self.root, ignore_errors=True)


def _pids_in(dirs: list[Path]) -> set[int]:
    pids: set[int] = set()
    for top in dirs:
        for procs in top.rglob("cgroup.procs"):
            try:
                pids.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def _remove_cgroups(dirs: list[Path]) -> None:
    deadline = time.monotonic() + 10
    for top in dirs:
        while top.exists() and time.monotonic() < deadline:
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                top.rmdir()
            except OSError:
                time.sleep(0.1)


# ------------------------------------------------------------------------------------------------- start


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _config(c: SlurmCluster, ctl_port: int, slurmd_port: int) -> None:
    host = socket.gethostname().split(".")[0]  # slurmctld only runs where SlurmctldHost names this host
    r = c.root
    devices = ",".join(str(d) for d in c.devices)
    _write(c.conf, f"""\
# gpufleet test cluster ({__file__})
ClusterName=gpufleet
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={c.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
FirstJobId={c.first_job_id}
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
MessageTimeout=5
NodeName={c.node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=4 RealMemory=1024 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=gpu Nodes={c.node} Default=YES MaxTime=INFINITE State=UP
""")
    _write(c.conf.with_name("gres.conf"), f"AutoDetect=off\nNodeName={c.node} Name=gpu File={devices}\n")
    # cgroup v2 (not tried here: these machines run v1): no systemd to ask for the stepd scope
    v2 = "IgnoreSystemd=yes\n" if c.cgroup == 2 else ""
    _write(c.conf.with_name("cgroup.conf"), "CgroupPlugin=autodetect\nConstrainDevices=no\n"
           f"ConstrainCores=no\nConstrainRAMSpace=no\n{v2}")


def _spawn(c: SlurmCluster, name: str, argv: list[str]) -> None:
    log = open(c.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - the child holds it
    try:
        c.daemons[name] = subprocess.Popen(argv, env=c.env, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def _dead(c: SlurmCluster) -> str | None:
    for name, p in c.daemons.items():
        if p.poll() is not None:
            out = (c.root / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
            return f"{name} exited {p.returncode}: {out}"
    return None


def start(timeout: float = START_TIMEOUT) -> SlurmCluster:
    """Start munged, slurmctld and slurmd; return once the node is idle with its four GPUs."""
    reason = skip_reason()
    if reason is not None:
        raise SlurmClusterError(reason)
    cg = cgroup_version()
    assert cg is not None
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-"))
    root.chmod(0o755)  # slurmstepd reads the spool dir as the job's user
    for d in ("etc", "state", "spool", "log", "run", "munge", "dev", "jobs"):
        (root / d).mkdir(mode=0o755)
    (root / "munge").chmod(0o700)
    devices = []
    for i in range(GPUS):
        dev = root / "dev" / f"nvidia{i}"
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))
        devices.append(dev)
    c = SlurmCluster(root=root, node=f"gft{random.randrange(16 ** 6):06x}", conf=root / "etc" / "slurm.conf",
                     munge_socket=root / "munge" / "munge.socket", devices=devices,
                     first_job_id=random.randrange(10_000, 2_000_000), cgroup=cg)
    try:
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        _config(c, free_port(), free_port())
        _spawn(c, "munged", ["munged", "-F", "--force", f"--socket={c.munge_socket}", f"--key-file={key}",
                             f"--pid-file={root / 'run' / 'munged.pid'}",
                             f"--log-file={root / 'log' / 'munged.log'}",
                             f"--seed-file={root / 'munge' / 'munged.seed'}"])
        logs = c.logs
        _wait("munged socket", lambda: c.munge_socket.exists() or bool(_dead(c)), timeout, logs)
        _spawn(c, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(c.conf)])
        _spawn(c, "slurmd", ["slurmd", "-D", "-N", c.node, "-f", str(c.conf)])

        def idle() -> bool:
            if _dead(c):
                return True
            out = c.run("scontrol", "-o", "show", "node", c.node, check=False, timeout=5)
            return "State=IDLE" in out
        _wait(f"node {c.node} idle", idle, timeout, logs)
        problem = _dead(c)
        if problem:
            raise SlurmClusterError(f"{problem}\n{c.logs()}")
    except BaseException:
        c.stop()
        raise
    return c


@contextmanager
def running(timeout: float = START_TIMEOUT) -> Iterator[SlurmCluster]:
    c = start(timeout)
    try:
        yield c
    finally:
        c.stop()
