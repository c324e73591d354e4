"""/proc attribution against a fake /proc tree (tmp_path) and against this test process's real /proc."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpufleet.agent.procinfo import ProcReader, parse_cgroup, parse_stat, parse_status_uid

CTR = "d0f631ca1ddba8db3bcfcb9e057cdc98d0379f1bee00e75a545147a27dadd982"
POD = "e00dcbd6-facc-5d2d-9da1-eee11a20fe71"
TICKS = os.sysconf("SC_CLK_TCK")
BTIME = 1_700_000_000


def stat_line(pid: int, comm: str, state: str, ppid: int, start_ticks: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    # cstime priority nice num_threads itrealvalue starttime ...
    rest = [state, str(ppid)] + ["0"] * 17 + [str(start_ticks)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def make_proc(
    root: Path,
    pid: int,
    *,
    uid: int = 0,
    comm: str = "python",
    state: str = "S",
    ppid: int = 1,
    cmdline: bytes = b"python\0train.py\0",
    cgroup: str = "0::/user.slice\n",
    start_ticks: int = 100 * TICKS,
) -> Path:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(stat_line(pid, comm, state, ppid, start_ticks))
    (d / "status").write_text(
        f"Name:\t{comm}\nState:\t{state}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    )
    (d / "cmdline").write_bytes(cmdline)
    (d / "cgroup").write_text(cgroup)
    return d


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\nprocesses 5\n")
    return tmp_path


def test_basic_attribution(proc: Path) -> None:
    make_proc(proc, 4242, uid=0, ppid=4200, cmdline=b"python\0train.py\0--config\0resnet50.yaml\0")
    info = ProcReader(proc).lookup(4242)
    assert info.attributed and info.status == "ok"
    assert info.user == pwd.getpwuid(0).pw_name and info.uid == 0
    assert info.command == "python train.py --config resnet50.yaml"
    assert info.ppid == 4200 and info.state == "S"
    assert info.start_time == pytest.approx(BTIME + 100)
    assert (info.container, info.pod, info.job) == (None, None, None)


def test_unknown_uid_is_its_number(proc: Path) -> None:
    make_proc(proc, 10, uid=4_000_000_001)
    assert ProcReader(proc).lookup(10).user == "4000000001"


def test_zombie_falls_back_to_comm(proc: Path) -> None:
    make_proc(proc, 11, comm="python (eval)", state="Z", cmdline=b"")
    info = ProcReader(proc).lookup(11)
    assert info.state == "Z" and info.command == "python (eval)" and info.attributed


@pytest.mark.parametrize(
    ("cgroup", "container", "pod", "job"),
    [
        (f"0::/system.slice/docker-{CTR}.scope\n", CTR, None, None),
        (f"12:memory:/docker/{CTR}\n11:cpu:/docker/{CTR}\n", CTR, None, None),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{POD.replace('-', '_')}.slice/cri-containerd-{CTR}.scope\n",
            CTR,
            POD,
            None,
        ),
        (f"0::/kubepods/besteffort/pod{POD}/{CTR}\n", CTR, POD, None),
        (f"0::/machine.slice/libpod-{CTR}.scope/container\n", CTR, None, None),
        (f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CTR}.scope\n", CTR, POD, None),
        ("0::/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0\n", None, None, "81234"),
        ("7:cpuset:/slurm/uid_1001/job_4567/step_batch\n", None, None, "4567"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None, None),
    ],
)
def test_cgroup_attribution(
    proc: Path, cgroup: str, container: str | None, pod: str | None, job: str | None
) -> None:
    make_proc(proc, 20, cgroup=cgroup)
    info = ProcReader(proc).lookup(20)
    assert (info.container, info.pod, info.job) == (container, pod, job)
    assert parse_cgroup(cgroup).container == container


def test_vanished_pid_is_unattributed(proc: Path) -> None:
    info = ProcReader(proc).lookup(999)
    assert info.status == "missing" and not info.attributed


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of their mode")
def test_unreadable_entry_is_unattributed_not_dead(proc: Path) -> None:
    d = make_proc(proc, 30)
    (d / "stat").chmod(0)
    try:
        info = ProcReader(proc).lookup(30)
    finally:
        (d / "stat").chmod(0o644)
    assert info.status == "denied" and not info.attributed


def test_hidden_entry_directory_is_unattributed(proc: Path) -> None:
    d = proc / "31"
    d.mkdir()  # the pid directory is there but its files are not (torn down / hidden)
    (d / "stat").mkdir()  # reading it raises IsADirectoryError: exists, can't be read
    info = ProcReader(proc).lookup(31)
    assert info.status == "denied" and not info.attributed


def test_status_unreadable_is_denied(proc: Path) -> None:
    d = make_proc(proc, 32)
    (d / "status").unlink()
    (d / "status").mkdir()
    assert ProcReader(proc).lookup(32).status == "denied"


def test_static_facts_cached_state_refreshed(proc: Path) -> None:
    d = make_proc(proc, 40, state="R")
    reader = ProcReader(proc)
    assert reader.lookup(40).state == "R"
    (d / "cmdline").write_bytes(b"changed\0")
    (d / "stat").write_text(stat_line(40, "python", "Z", 1, 100 * TICKS))
    info = reader.lookup(40)
    assert info.state == "Z" and info.command == "python train.py"  # same process: cached static facts
    # pid reused by a new process (different start time): read afresh
    (d / "stat").write_text(stat_line(40, "python", "S", 1, 500 * TICKS))
    assert reader.lookup(40).command == "changed"


def test_parse_stat_comm_with_parens_and_spaces() -> None:
    comm, state, ppid, start = parse_stat(stat_line(7, "a) (b c", "D", 3, 12345))
    assert (comm, state, ppid, start) == ("a) (b c", "D", 3, 12345)


def test_hidepid_detection(proc: Path) -> None:
    (proc / "self").mkdir()
    (proc / "self" / "mountinfo").write_text(
        "22 26 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw,hidepid=invisible\n"
    )
    assert ProcReader(proc).hides_pids() is True
    (proc / "self" / "mountinfo").write_text("22 26 0:21 / /proc rw,relatime shared:12 - proc proc rw\n")
    assert ProcReader(proc).hides_pids() is False


def test_real_proc_of_this_process() -> None:
    reader = ProcReader()
    info = reader.lookup(os.getpid())
    assert info.attributed
    assert info.uid == os.getuid()
    assert info.user == pwd.getpwuid(os.getuid()).pw_name
    assert info.ppid == os.getppid()
    assert info.state in ("R", "S")
    assert info.command is not None
    assert "python" in info.command.lower() or "pytest" in info.command
    assert info.start_time is not None and info.start_time <= time.time() + 1
    assert time.time() - info.start_time < 24 * 3600  # this test process started recently


def test_real_proc_missing_pid() -> None:
    assert ProcReader().lookup(2**22 + 12345).status == "missing"


@pytest.mark.parametrize(("text", "uid"), [
    ("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\n", 1000),
    ("Name:\tpython\n", None),
    ("Uid:\n", None),
    ("Uid:\tabc\n", None),
])
def test_status_uid_never_raises_on_odd_lines(text: str, uid: int | None) -> None:
    assert parse_status_uid(text) == uid


def test_a_process_whose_name_is_not_utf8_is_still_attributed() -> None:
    """A real process renames itself with bytes that are not UTF-8 (prctl/comm take any bytes): it is
    read and attributed, its name with replacement characters, never reported unattributed."""
    code = ("import sys, time\nopen('/proc/self/comm', 'wb').write(b'\\xff\\xfetrainer')\n"
            "print(flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()
        assert Path(f"/proc/{child.pid}/comm").read_bytes() == b"\xff\xfetrainer\n"
        info = ProcReader().lookup(child.pid)
        assert info.attributed and info.status == "ok" and info.uid == os.getuid()
        assert info.state in ("R", "S") and info.ppid == os.getpid()
    finally:
        child.kill()
        child.wait()
