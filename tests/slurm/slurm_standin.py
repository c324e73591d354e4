#!/usr/bin/env python3
"""A stand-in ``scontrol``: answers ``scontrol -o show job [-d] ID`` in Slurm's one-line format from a JSON
state file, for the tests that need a Slurm that hangs, fails or counts calls (tests/slurm/cluster.py runs
the real one). With ``-d``, a job given ``gres`` also gets its allocation group (``Nodes=... GRES=<gres>``)
as Slurm 23.x prints it.

State file (JSON): ``{"mode": "ok" | "hang" | "invalid", "jobs": {"12345": {"name": ..., "user": ...,
"uid": ..., "account": ..., "partition": ..., "state": ..., "gres": "gpu:2(IDX:0-1)"}}, "calls": "optional
path to append ids to"}``.
- ``ok``: a known id prints its record (Slurm 23.x field order); an unknown one prints Slurm's own
  ``slurm_load_jobs error: Invalid job id specified`` on stderr and exits 1.
- ``invalid``: that error for every id.
- ``hang``: starts a child ``sleep`` (so killing only scontrol would leave a process behind), writes both
  pids to ``<state>.pids`` and sleeps forever.

:func:`install` writes an executable wrapper for the agent's ``--scontrol`` (the state path baked in, so it
works wherever the agent runs: the SSH test kit does not pass the environment on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def record(job_id: str, j: dict[str, Any], detail: bool = False) -> str:
    """One ``scontrol -o show job [-d]`` line, field order and spelling as Slurm prints them."""
    user, uid = j.get("user", "alice"), j.get("uid", 1001)
    name = j.get("name", "job")
    part, state = j.get("partition", "gpu"), j.get("state", "RUNNING")
    return (
        f"JobId={job_id} JobName={name} UserId={user}({uid}) GroupId={user}({uid}) MCS_label=N/A "
        f"Priority=4294901758 Nice=0 Account={j.get('account', 'default')} QOS=normal JobState={state} "
        "Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
        "RunTime=00:42:17 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-12-03T14:00:01 "
        "EligibleTime=2026-12-03T14:00:01 AccrueTime=2026-12-03T14:00:01 StartTime=2026-12-03T14:00:02 "
        "EndTime=2026-12-04T14:00:02 Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval=2026-12-03T14:00:02 Scheduler=Main Partition={part} AllocNode:Sid=login1:48211 "
        "ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu-node-01 BatchHost=gpu-node-01 NumNodes=1 "
        "NumCPUs=16 NumTasks=1 CPUs/Task=16 ReqB:S:C:T=0:0:*:* "
        "ReqTRES=cpu=16,mem=128G,node=1,billing=16,gres/gpu=2 "
        "AllocTRES=cpu=16,mem=128G,node=1,billing=16,gres/gpu=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* "
        f"CoreSpec=* {_detail(j) if detail and 'gres' in j else ''}"
        "MinCPUsNode=16 MinMemoryNode=128G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
        "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) "
        f"Command=/home/{user}/run.sh WorkDir=/home/{user} StdErr=/home/{user}/slurm-{job_id}.out "
        f"StdIn=/dev/null StdOut=/home/{user}/slurm-{job_id}.out Power= TresPerNode=gres/gpu:2"
    )


def _detail(j: dict[str, Any]) -> str:
    gres = j["gres"]
    total = gres.split("(")[0] if gres else "(null)"
    return f"JOB_GRES={total} Nodes=gpu-node-01 CPU_IDs=0-15 Mem=131072 GRES={gres} "


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--state":
        print("usage: slurm_standin.py --state FILE -o show job ID", file=sys.stderr)
        return 2
    state_path = Path(argv[1])
    args = argv[2:]
    detail = "-d" in args
    args = [a for a in args if a != "-d"]
    if args[:3] != ["-o", "show", "job"] or len(args) != 4:
        print(f"scontrol stand-in: unsupported arguments {args}", file=sys.stderr)
        return 2
    job_id = args[3]
    state = json.loads(state_path.read_text())
    calls = state.get("calls")
    if calls:
        with open(calls, "a") as f:
            f.write(job_id + "\n")
    mode = state.get("mode", "ok")
    if mode == "hang":
        child = subprocess.Popen(["sleep", "100000"])
        Path(f"{state_path}.pids").write_text(f"{os.getpid()} {child.pid}\n")
        while True:
            time.sleep(3600)
    jobs = state.get("jobs", {})
    if mode == "invalid" or job_id not in jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    print(record(job_id, jobs[job_id], detail))
    return 0


def install(directory: Path, state: dict[str, Any]) -> tuple[Path, Path]:
    """An executable ``scontrol`` in ``directory`` answering from ``state``; returns (binary, state file)."""
    state_file = directory / "slurm_state.json"
    write_state(state_file, state)
    binary = directory / "scontrol"
    script = Path(__file__).resolve()
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {script} --state {state_file} "$@"\n')
    binary.chmod(0o755)
    return binary, state_file


def write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
