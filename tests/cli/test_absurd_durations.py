"""Absurd durations on the command line against a real `gpufleet collector run` (local transport, a fake
agent): one clear usage line, exit 2, and nothing created (issue 12, item 8)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_testkit import cli_env, collector_running, run_cli

pytestmark = pytest.mark.slow

HUGE_WEEKS = "999999999999999999999999999999w"


async def _until(check: Any, timeout: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not met in {timeout} s; last: {last}")


async def test_absurd_durations_are_usage_errors_and_create_nothing(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    cfg.write_text(f"""hosts:
  - name: here
    transport: local
    interval: 0.2s
    agent_args: [--fake, busy]
storage:
  path: {home / "gpufleet.db"}
  batch_max_delay: 100ms
api:
  socket: {home / "gpufleet.sock"}
""")
    env = cli_env(home)
    async with collector_running(cfg, env, stdout=asyncio.subprocess.PIPE):
        async def up() -> Any:
            r = await run_cli("status", "-c", str(cfg), "--json", env=env)
            hosts = json.loads(r.out)["hosts"] if r.rc == 0 else []
            return hosts and hosts[0]["status"] == "up"

        await _until(up)
        for args in (("alerts", "--since", HUGE_WEEKS),
                     ("history", "--host", "here", "--since", HUGE_WEEKS),
                     ("report", "--since", HUGE_WEEKS),
                     ("history", "--host", "here", "--since", "1h", "--until", "99999999999d")):
            r = await run_cli(*args, "-c", str(cfg), env=env)
            assert r.rc == 2, (args, r.err)
            assert r.err.count("\n") == 1 and "Traceback" not in r.err and "internal" not in r.err, r.err
            assert r.err.startswith("gpufleet: bad --") and "too long (at most 100 years)" in r.err, r.err

        r = await run_cli("silence", "add", "--host", "here", "--for", "99999999999d", "-c", str(cfg),
                          env=env)
        assert (r.rc, r.out) == (2, "")
        assert r.err == ("gpufleet: bad --for '99999999999d': duration '99999999999d' is too long "
                         "(at most 100 years)\n")
        r = await run_cli("silence", "list", "--all", "--json", "-c", str(cfg), env=env)
        assert r.rc == 0 and json.loads(r.out) == [], "the refused silence was not created"

        # the longest accepted values still work end to end (no overflow further in)
        r = await run_cli("alerts", "--since", "5200w", "-c", str(cfg), env=env)
        assert r.rc == 0, r.err
        r = await run_cli("history", "--host", "here", "--since", "5200w", "--json", "-c", str(cfg), env=env)
        assert r.rc == 0, r.err
        r = await run_cli("silence", "add", "--host", "here", "--for", "5200w", "-c", str(cfg), env=env)
        assert r.rc == 0 and r.out.startswith("silence 1: host=here for 36400d00h (until "), r.err
