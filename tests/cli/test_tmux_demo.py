"""`gpufleet demo` on real terminals (tmux at 80x24 and 200x50): all six hosts and the wasted alert are on
the screen at once, nothing is cut mid-flag, no "... N more" while rows are left; Ctrl-C and q exit 0."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import time
import uuid
from pathlib import Path

import pytest
from gpufleet.cli.demo import DEMO_HOSTS
from gpufleet.collector.rules.catalog import FLAGS

from tests.cli.cli_testkit import gpufleet_argv, pane_until, tmux, tmux_env, tmux_start

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"), pytest.mark.slow]

WASTED_ALERT = "wasted    gpu-node-03 GPU 0: alice's"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("width,height", [(80, 24), (200, 50)])
async def test_demo_screen_fits_the_terminal(home: Path, width: int, height: int) -> None:
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    cmd = " ".join(shlex.quote(a) for a in gpufleet_argv()) + " demo --interval 0.5; echo EXIT=$?; sleep 60"
    started = time.monotonic()
    await tmux_start(sock, cmd, width, height, tmux_env(home, TMPDIR=str(home)))
    try:
        # the wasted rule runs with a 20 s `for:` in the demo; the zombie and the lost GPU are earlier
        text = await pane_until(sock, WASTED_ALERT, "stale", "lost", "hot", timeout=120)
        seconds = time.monotonic() - started
        print(f"\n{width}x{height}: wasted alert on screen after {seconds:.1f} s\n{text}")
        lines = text.splitlines()
        assert len(lines) <= height and all(len(line) <= width for line in lines)
        for host in DEMO_HOSTS:
            assert re.search(rf"^{host} ", text, re.M), f"{host} not on screen:\n{text}"
        assert "Firing alerts:" in text
        banner = lines[0].rstrip()  # folded by now: one line that says what to run next, not cut
        assert "gpufleet top" in banner and not banner.endswith("…"), banner
        ends = [line.split()[-1].rstrip("…") for line in lines if line.strip()]
        flags = set(FLAGS)
        clipped = [w for w in ends if w not in flags and len(w) >= 3 and any(f.startswith(w) for f in flags)]
        assert not clipped, f"flags cut at the edge: {clipped}\n{text}"
        if height >= 50:
            assert "more (gpufleet alerts)" not in text  # every alert shows when rows are left
        await tmux(sock, "send-keys", "-t", "gf", "C-c" if width == 80 else "q")  # either quits
        text = await pane_until(sock, "EXIT=", timeout=60)
        assert "EXIT=0" in text and "Traceback" not in text, text
    finally:
        await tmux(sock, "kill-server")
        await asyncio.sleep(0)
