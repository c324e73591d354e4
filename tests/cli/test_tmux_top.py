"""`gpufleet top` on a real terminal against a running `gpufleet demo`: keys in with tmux send-keys, the
screen read back with capture-pane, at 80x24 and (resized) 200x50; `q` and Esc exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from gpufleet.cli.demo import DEMO_HOSTS

from tests.cli.cli_testkit import cli_env, gpufleet_argv, pane_until, run_cli, tmux, tmux_env, tmux_start

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"), pytest.mark.slow]


async def until(check: Any, timeout: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.5)
    raise AssertionError("condition not met in time")


def rows(text: str) -> list[str]:
    """The GPU rows of the list screen (between the column header and the state line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    return [line for line in lines[start + 1 :] if line.startswith("gpu-node-")]


@pytest.mark.timeout(240)
async def test_top_sorts_filters_opens_a_gpu_and_quits(home: Path) -> None:
    env = cli_env(home, TMPDIR=str(home))
    demo = await asyncio.create_subprocess_exec(
        *gpufleet_argv(), "demo", "--no-screen", "--interval", "0.5", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    try:

        async def wasted_flagged() -> Any:
            r = await run_cli("status", "--json", env=env)
            if r.rc != 0:
                return None
            hosts = json.loads(r.out)["hosts"]
            flags = {f for h in hosts for g in h["gpus"] for f in g["flags"]}
            return sum(h["status"] == "up" for h in hosts) == len(DEMO_HOSTS) and "wasted" in flags

        await until(wasted_flagged, timeout=120)
        top = " ".join(shlex.quote(a) for a in gpufleet_argv()) + " top --interval 0.5"
        first_rc = home / "top1.rc"  # the second top's screen covers the first's echo: a file keeps it
        twice = f"{top}; echo $? > {shlex.quote(str(first_rc))}; {top}; echo EXIT2=$?; sleep 60"
        await tmux_start(sock, twice, 80, 24, tmux_env(home))

        text = await pane_until(sock, "gpufleet top", "sort: host", "q quit")
        lines = text.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
        first, last = next(iter(DEMO_HOSTS)), list(DEMO_HOSTS)[-1]
        assert rows(text)[0].startswith(first) and len(rows(text)) >= 16, text  # a screenful of GPUs
        if last not in text:  # more GPUs than rows: End scrolls to the last one, Home back
            await tmux(sock, "send-keys", "-t", "gf", "End")
            text = await pane_until(sock, last)
            assert rows(text)[-1].startswith(last) and len(lines) <= 24, text
            await tmux(sock, "send-keys", "-t", "gf", "Home")
            text = await pane_until(sock, first)

        await tmux(sock, "send-keys", "-t", "gf", "w")
        text = await pane_until(sock, "sort: waste")
        first = rows(text)[0]
        assert first.startswith("gpu-node-03  0") and "wasted" in first, text  # 40 GiB held at ~0 %

        await tmux(sock, "send-keys", "-t", "gf", "u")
        text = await pane_until(sock, "sort: util")
        utils = [int(m.group(1)) for r in rows(text) if (m := re.search(r" (\d+)% ", r))]
        assert utils == sorted(utils, reverse=True) and utils[0] >= 80, text

        await tmux(sock, "send-keys", "-t", "gf", "/", "a", "l", "i", "c", "e", "Enter")
        text = await pane_until(sock, "filter: alice")
        shown = rows(text)
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
        with contextlib.suppress(AssertionError):  # no server when the demo never came up
            await tmux(sock, "kill-server")
        if demo.returncode is None:
            os.killpg(demo.pid, signal.SIGINT)
            try:
                await asyncio.wait_for(demo.wait(), 60)
            except asyncio.TimeoutError:
                demo.kill()
                await demo.wait()
