"""What issue 36 asks of every screen, read off real terminal screens (tmux) and real command output: each
problem of the demo (a host, a GPU, a user and a flag) visible in full. Used by tests/cli/test_demo.py,
which runs the one shared demo."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from gpufleet.collector.rules.catalog import flag_name

from tests.cli.cli_testkit import gpufleet_argv, pane_until, run_cli, tmux, tmux_start

STATES = ("critical", "warning", "info", "pending", "silenced")
SIZES = ((60, 20), (80, 24), (120, 40))


@dataclass(frozen=True)
class Culprit:
    """One alert's who and where, as the alerts' labels say it."""

    host: str
    gpu: str
    user: str
    flag: str

    def __str__(self) -> str:
        return f"{self.flag} on {self.host} GPU {self.gpu}" + (f" ({self.user})" if self.user else "")


async def culprits(env: dict[str, str]) -> list[Culprit]:
    """The demo's firing problems, one per alert on a GPU."""
    r = await run_cli("alerts", "--json", env=env)
    if r.rc != 0:  # the demo is still starting: none yet
        return []
    out = set()
    for a in json.loads(r.out)["active"]:
        lab = a["labels"]
        if a["state"] == "firing" and "gpu" in lab:
            out.add(Culprit(lab["host"], lab["gpu"], lab.get("user", ""), flag_name(a["rule"])))
    return sorted(out, key=lambda c: (c.host, c.gpu, c.flag))


async def terminal_output(cmd: str, width: int, height: int, env: dict[str, str]) -> str:
    """``gpufleet CMD`` run once on a real terminal of that size (tmux), everything it wrote (the scrollback
    too), wrapped lines joined again: a line longer than ``width`` here is one the terminal had to wrap."""
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    line = " ".join(gpufleet_argv()) + f" {cmd}; echo __DONE__; sleep 60"
    await tmux_start(sock, line, width, height, env)
    try:
        await pane_until(sock, "__DONE__", timeout=60)
        text = await tmux(sock, "capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", "gf")
    finally:
        await tmux(sock, "kill-server")
    return "\n".join(line.rstrip() for line in text.splitlines()).split("__DONE__")[0]


def too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def status_rows(text: str) -> dict[tuple[str, str], str]:
    """(host, GPU index) -> its line on the status screen (a host's first line names it; the next are
    indented under it)."""
    rows: dict[tuple[str, str], str] = {}
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    host = ""
    for line in lines[start + 1:]:
        words = line.split()
        if not words:
            continue
        if not line.startswith(" "):
            host, words = words[0], words[1:]
        if host and words and words[0].isdigit():
            rows[(host, words[0])] = line
    return rows


def missing_in_status(text: str, want: list[Culprit]) -> list[str]:
    rows = status_rows(text)
    out = []
    for c in want:
        line = rows.get((c.host, c.gpu))
        words = line.split() if line else []
        if line is None or c.flag not in words or (c.user and c.user not in words):
            out.append(f"{c}: {line!r}")
    return out


def alert_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] and line.split()[0] in STATES]


def missing_in_alerts(text: str, want: list[Culprit]) -> list[str]:
    rows = alert_rows(text)
    out = []
    for c in want:
        if not any(c.host in w and c.flag in w and any(c.gpu in t.split(",") for t in w)
                   and (not c.user or c.user in w) for w in rows):
            out.append(str(c))
    return out


def missing_in_jobs(text: str, jobs: list[dict[str, Any]]) -> list[str]:
    """Each finished job's user, job, host and GPU whole on one line."""
    out = []
    for j in jobs:
        label = f"job {j['key'][6:]}" if j["key"].startswith("slurm:") else f"pid {j['key'].split(':')[1]}"
        label = re.sub(r"\.\d+@.*$", "", label)
        host, _, gpu = j["gpus"][0].rpartition(":")
        if not any(j["user"] in w and label in line and host in w and gpu in w
                   for line in text.splitlines() for w in [line.split()]):
            out.append(f"{j['user']} {label} {host} GPU {gpu}")
    return out
