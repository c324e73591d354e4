"""`gpufleet status --watch` on a real terminal (tmux, 120x40): read the screen, Ctrl-C, clean exit."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import uuid
from pathlib import Path

import pytest
from gpufleet.collector.faces.api.server import QueryServer

from tests.cli.cli_testkit import gpufleet_argv

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


async def tmux(sock: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        "tmux", "-L", sock, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def screen_until(sock: str, want: str, timeout: float = 20.0) -> str:
    """Poll the pane until ``want`` shows (the server under test keeps running on this loop meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    text = ""
    while loop.time() < deadline:
        text = await tmux(sock, "capture-pane", "-p", "-t", "gf")
        if want in text:
            return text
        await asyncio.sleep(0.2)
    raise AssertionError(f"{want!r} never appeared on screen; last screen:\n{text}")


async def test_status_watch_in_tmux(server: QueryServer, home: Path) -> None:
    import os

    sock = f"gf-{uuid.uuid4().hex[:8]}"
    cmd = (
        " ".join(shlex.quote(a) for a in gpufleet_argv())
        + f" --socket {shlex.quote(str(server.path))} status --watch 0.5; echo EXIT=$?; sleep 60"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "GPUFLEET_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), TERM="xterm-256color")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    await tmux(
        sock, "-f", "/dev/null", "new-session", "-d", "-s", "gf", "-x", "120", "-y", "40", cmd, env=env
    )
    try:
        text = await screen_until(sock, "gpufleet status  live")
        text = await screen_until(sock, "n5")
        for want in ("n1", "n2", "n3", "6 hosts: 5 up, 1 down", "dave", "alice", "wasted", "hot", "lost"):
            assert want in text, f"{want!r} not on screen:\n{text}"
        lines = text.splitlines()
        assert len(lines) <= 40 and all(len(line) <= 120 for line in lines)
        await tmux(sock, "send-keys", "-t", "gf", "C-c")
        text = await screen_until(sock, "EXIT=")
        assert "EXIT=0" in text, text
        assert "Traceback" not in text and "KeyboardInterrupt" not in text
    finally:
        await tmux(sock, "kill-server")


async def test_status_watch_quits_on_q(server: QueryServer, home: Path) -> None:
    """`q` ends the watch screen (exit 0), no Ctrl-C needed; the terminal is left in its normal mode."""
    from tests.cli.cli_testkit import pane_until, tmux_env, tmux_start

    sock = f"gf-{uuid.uuid4().hex[:8]}"
    cmd = (
        " ".join(shlex.quote(a) for a in gpufleet_argv())
        + f" --socket {shlex.quote(str(server.path))} status --watch 0.5; echo EXIT=$?; stty -a; sleep 60"
    )
    await tmux_start(sock, cmd, 100, 30, tmux_env(home))
    try:
        await pane_until(sock, "gpufleet status  live", "n5")
        await tmux(sock, "send-keys", "-t", "gf", "q")
        text = await pane_until(sock, "EXIT=")
        assert "EXIT=0" in text and "Traceback" not in text, text
        assert re.search(r"(?<![-\w])icanon", text) and re.search(r"(?<![-\w])echo\b", text), text  # cooked
    finally:
        await tmux(sock, "kill-server")
