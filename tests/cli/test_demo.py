"""`gpufleet demo` on a real terminal, one demo for all of it: the demo runs in tmux (200x50) for this whole
module, so its 20 s wasted alert (and its diagnoses' windows) are waited for once, not once per test. In
order, the tests read its screen at 200x50, ask it with the README's plain commands (its pointer file, no
--socket and no config), drive `gpufleet top` against it (80x24, resized to 200x50; q and Esc), read its
screen again resized to 80x24, see its four diagnoses fire within the 2 minutes it promises, and quit it
with q: exit 0, its agents, temp data and pointer gone. (A piped demo and Ctrl-C to a demo's process
group are test_e2e.py's: they need no alert.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpufleet.cli.demo import DEMO_HOSTS
from gpufleet.collector.rules.catalog import FLAGS

from tests.cli.cli_testkit import (
    alive,
    children,
    gpufleet_argv,
    pane_until,
    run_cli,
    tmux,
    tmux_env,
    tmux_start,
    until,
)

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"), pytest.mark.slow]

WASTED_ALERT = "wasted    gpu-node-03 GPU 0: alice's"


@dataclass
class Demo:
    home: Path
    sock: str  # the demo's tmux server
    env: dict[str, str]
    started: float  # time.monotonic() when it was started

    @property
    def pointer(self) -> Path:
        return self.home / "run" / "gpufleet" / "current-demo.json"


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    home = Path(tempfile.mkdtemp(prefix="gfdemo-", dir="/tmp"))  # short: Unix socket paths
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    env = tmux_env(home, TMPDIR=str(home))  # its own temp dir: other demos may be running
    cmd = " ".join(shlex.quote(a) for a in gpufleet_argv()) + " demo --interval 0.5; echo EXIT=$?; sleep 60"
    started = time.monotonic()
    subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "gf", "-x", "200", "-y",
                    "50", cmd], env=env, check=True, timeout=10)
    try:
        yield Demo(home, sock, env, started)
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
        shutil.rmtree(home, ignore_errors=True)


def _fits(text: str, width: int, height: int) -> None:
    """The demo's screen: every host and the wasted alert at once, nothing past the edges, no flag cut."""
    lines = text.splitlines()
    assert len(lines) <= height and all(len(line) <= width for line in lines), text
    for host in DEMO_HOSTS:
        assert re.search(rf"^{host} ", text, re.M), f"{host} not on screen:\n{text}"
    assert "Firing alerts:" in text
    banner = lines[0].rstrip()  # folded by now: one line that says what to run next, not cut
    assert "gpufleet top" in banner and not banner.endswith("…"), banner
    ends = [line.split()[-1].rstrip("…") for line in lines if line.strip()]
    clipped = [w for w in ends if w not in FLAGS and len(w) >= 3 and any(f.startswith(w) for f in FLAGS)]
    assert not clipped, f"flags cut at the edge: {clipped}\n{text}"


@pytest.mark.timeout(180)
async def test_demo_screen_fits_200x50(demo: Demo) -> None:
    # the wasted rule runs with a 20 s `for:` in the demo; the zombie and the lost GPU are earlier
    text = await pane_until(demo.sock, WASTED_ALERT, "stale", "lost", "hot", timeout=120)
    _fits(text, 200, 50)
    assert "more (gpufleet alerts)" not in text  # every alert shows when rows are left


async def test_readme_commands_work_against_the_running_demo(demo: Demo) -> None:
    """Plain `gpufleet status` / `alerts` / `hosts` ask the demo: it names its socket in a pointer file in
    the user's runtime folder."""
    async def hosts_up() -> Any:
        r = await run_cli("status", "--json", env=demo.env)
        hosts = json.loads(r.out)["hosts"] if r.rc == 0 else []
        return hosts if sum(h["status"] == "up" for h in hosts) == len(DEMO_HOSTS) else None

    hosts = await until(hosts_up, timeout=60)
    assert [h["name"] for h in hosts][0] == "gpu-node-01"
    assert json.loads(demo.pointer.read_text())["pid"] > 0
    readme = (
        ("status",), ("status", "--by", "user"), ("status", "--tag", "demo"), ("alerts",), ("hosts",),
        ("history", "--host", "gpu-node-03"), ("report", "--since", "1h"), ("silence", "list"),
    )
    for args in readme:
        r = await run_cli(*args, env=demo.env)
        assert r.rc == 0 and "collector not running" not in r.err, (args, r.err)
    assert "gpu-node-03" in (await run_cli("hosts", env=demo.env)).out


def _rows(text: str) -> list[str]:
    """The GPU rows of top's list screen (between the column header and the state line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    return [line for line in lines[start + 1 :] if line.startswith("gpu-node-")]


@pytest.mark.timeout(180)
async def test_top_sorts_filters_opens_a_gpu_and_quits(demo: Demo) -> None:
    """`gpufleet top` against the demo: keys in with tmux send-keys, the screen read back, at 80x24 and
    (resized) 200x50; q and Esc exit 0."""
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    top = " ".join(shlex.quote(a) for a in gpufleet_argv()) + " top --interval 0.5"
    first_rc = demo.home / "top1.rc"  # the second top's screen covers the first's echo: a file keeps it
    twice = f"{top}; echo $? > {shlex.quote(str(first_rc))}; {top}; echo EXIT2=$?; sleep 60"
    await tmux_start(sock, twice, 80, 24, demo.env)
    try:
        text = await pane_until(sock, "gpufleet top", "sort: host", "q quit")
        lines = text.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
        first, last = next(iter(DEMO_HOSTS)), list(DEMO_HOSTS)[-1]
        assert _rows(text)[0].startswith(first) and len(_rows(text)) >= 16, text  # a screenful of GPUs
        if last not in text:  # more GPUs than rows: End scrolls to the last one, Home back
            await tmux(sock, "send-keys", "-t", "gf", "End")
            text = await pane_until(sock, last)
            assert _rows(text)[-1].startswith(last) and len(lines) <= 24, text
            await tmux(sock, "send-keys", "-t", "gf", "Home")
            text = await pane_until(sock, first)

        await tmux(sock, "send-keys", "-t", "gf", "w")
        text = await pane_until(sock, "sort: waste")
        first = _rows(text)[0]
        assert first.startswith("gpu-node-03  0") and "wasted" in first, text  # 40 GiB held at ~0 %

        await tmux(sock, "send-keys", "-t", "gf", "u")
        text = await pane_until(sock, "sort: util")
        utils = [int(m.group(1)) for r in _rows(text) if (m := re.search(r" (\d+)% ", r))]
        assert utils == sorted(utils, reverse=True) and utils[0] >= 80, text

        await tmux(sock, "send-keys", "-t", "gf", "/", "a", "l", "i", "c", "e", "Enter")
        text = await pane_until(sock, "filter: alice")
        shown = _rows(text)
        assert shown and all("alice" in r for r in shown) and not any("carol" in r for r in shown), text

        await tmux(sock, "send-keys", "-t", "gf", "Enter")
        text = await pane_until(sock, "PID", "alice", "ipykernel", "util ", "Esc/⏎ back")
        assert "gpu-node-03 GPU 0" in text and "wasted" in text, text
        await tmux(sock, "send-keys", "-t", "gf", "Escape")
        text = await pane_until(sock, "filter: alice", "q quit")

        await tmux(sock, "send-keys", "-t", "gf", "/", "Enter")  # an empty filter clears it
        await tmux(sock, "resize-window", "-t", "gf", "-x", "200", "-y", "50")
        text = await pane_until(sock, "POWER", "gpu-node-11")  # the wide layout, every host again
        lines = text.splitlines()
        assert len(lines) <= 50 and all(len(line) <= 200 for line in lines), text
        assert "filter:" not in text and all(h in text for h in DEMO_HOSTS), text

        await tmux(sock, "send-keys", "-t", "gf", "q")
        await until(lambda: asyncio.sleep(0, first_rc.exists()), timeout=20)
        assert first_rc.read_text().strip() == "0"
        await pane_until(sock, "gpufleet top", "sort: host ↓")  # the second one, to quit with Esc
        await tmux(sock, "send-keys", "-t", "gf", "Escape")
        text = await pane_until(sock, "EXIT2=")
        assert "EXIT2=0" in text and "Traceback" not in text, text
    finally:
        with contextlib.suppress(AssertionError):
            await tmux(sock, "kill-server")


async def test_demo_screen_fits_80x24_after_a_resize(demo: Demo) -> None:
    await tmux(demo.sock, "resize-window", "-t", "gf", "-x", "80", "-y", "24")
    text = await pane_until(demo.sock, WASTED_ALERT, timeout=30)
    await asyncio.sleep(1.5)  # a redraw or two at the new size
    text = await pane_until(demo.sock, WASTED_ALERT, timeout=30)
    _fits(text, 80, 24)


DIAGNOSES = {"input_bound": "gpu-node-13", "idle_peers": "gpu-node-15", "near_oom": "gpu-node-17",
             "underused": "gpu-node-19"}


@pytest.mark.timeout(180)
async def test_demo_hosts_show_the_diagnoses_within_two_minutes(demo: Demo) -> None:
    """The demo's diagnosis hosts: the real collector on the demo's own config (cli/demo.yaml, short
    windows) and the real `gpufleet alerts` show input_bound, idle_peers, near_oom and underused within the
    2 minutes the demo promises, each only where it belongs."""
    assert set(DIAGNOSES.values()) <= set(DEMO_HOSTS), "the demo runs a host per diagnosis"
    firing: dict[str, set[str]] = {}
    active: list[dict[str, Any]] = []
    while time.monotonic() - demo.started < 120:
        r = await run_cli("alerts", "--json", env=demo.env)
        assert r.rc == 0, r.err
        active = [a for a in json.loads(r.out)["active"] if a["state"] == "firing"]
        firing = {}
        for a in active:
            firing.setdefault(a["rule"], set()).add(a["labels"]["host"])
        if all(host in firing.get(rule, ()) for rule, host in DIAGNOSES.items()):
            break
        await asyncio.sleep(2)
    took = time.monotonic() - demo.started
    assert all(host in firing.get(rule, ()) for rule, host in DIAGNOSES.items()), (took, firing)
    # each only where it belongs: the well-fed and roomy jobs next to them are not flagged
    assert firing["input_bound"] == {"gpu-node-13"} and firing["near_oom"] == {"gpu-node-17"}
    assert firing["idle_peers"] == {"gpu-node-15"} and firing["underused"] == {"gpu-node-19"}
    idle = sorted(a["labels"]["gpu"] for a in active if a["rule"] == "idle_peers")
    assert idle == ["1", "2", "3"], "the ranks that sit idle, not the busy one"
    r = await run_cli("alerts", env=demo.env)
    assert r.rc == 0 and "input-bound" in r.out and "near out of memory" in r.out, r.out
    print(f"\nall four diagnoses firing {took:.0f} s after the demo started")


async def test_q_ends_the_demo_and_leaves_nothing_behind(demo: Demo) -> None:
    pid = json.loads(demo.pointer.read_text())["pid"]
    agents = {p: c for p, c in children(pid).items() if "gpufleet.agent" in c}
    assert len(agents) == len(DEMO_HOSTS), agents
    workdirs = set(demo.home.glob("gpufleet-demo-*"))
    assert len(workdirs) == 1
    await tmux(demo.sock, "send-keys", "-t", "gf", "q")
    text = await pane_until(demo.sock, "EXIT=", timeout=60)
    assert "EXIT=0" in text and "Traceback" not in text, text
    assert not any(w.exists() for w in workdirs), "the demo's temp data is removed"
    assert not {p: c for p, c in agents.items() if alive(p, c)}, "agent processes left behind"
    assert not demo.pointer.exists()
    r = await run_cli("status", env=demo.env)
    assert r.rc == 3 and "collector not running" in r.err
