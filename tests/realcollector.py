"""The real collector daemon (``gpufleet collector run``) watching this machine through the real agent, its
local child (``transport: local``), with its query socket, /metrics and web page on loopback: for tests of
what the agent reads from other real host parts (a real Slurm, a kubelet's cgroups and directories) all the
way to what people read (the CLI, the page's API, Prometheus' text).

Start it with tests/cli/cli_testkit.py's ``collector_running`` and an environment that loads the fake
libnvidia-ml.so.1 (tests/fakenvml/fakelib.py ``env_for``).
"""

from __future__ import annotations

import json
import shlex
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import free_port
from tests.cli.cli_testkit import gpufleet_argv, pane_until, run_cli, tmux, tmux_env, tmux_start

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Ports:
    """The loopback ports of one collector's faces."""

    def __init__(self) -> None:
        self.metrics, self.web = free_port(), free_port()


def local_config(home: Path, host: str, agent_args: Sequence[str], ports: Ports, rules: str = "",
                 metrics: str = "") -> Path:
    """A gpufleet.yaml for one local host sampled every 0.2 s; ``rules``/``metrics``: more YAML under those
    keys (indented by two spaces)."""
    cfg = home / "gpufleet.yaml"
    args = ", ".join(json.dumps(a) for a in agent_args)
    cfg.write_text(f"""hosts:
  - name: {host}
    transport: local
    interval: 0.2s
    agent_args: [{args}]
storage:
  path: {home / "gpufleet.db"}
  batch_max_delay: 100ms
api:
  socket: {home / "gpufleet.sock"}
metrics:
  listen: 127.0.0.1:{ports.metrics}
{metrics}web:
  enabled: true
  listen: 127.0.0.1:{ports.web}
rules:
{rules or "  {}"}
""")
    return cfg


def http_get(url: str) -> str:
    """GET on loopback, never through a proxy (blocking: call it in a thread from a test's loop)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as r:
        return str(r.read().decode())


async def cli_json(*args: str, env: dict[str, str]) -> Any:
    """``gpufleet ARGS --json``'s answer, or None when the command failed."""
    r = await run_cli(*args, "--json", env=env)
    return json.loads(r.out) if r.rc == 0 else None


def series(exposition: str) -> Series:
    """(name, sorted labels) -> value of every sample of a Prometheus text exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(exposition) for s in fam.samples}


async def top_screen(cfg: Path, home: Path, *wants: str, width: int = 200, height: int = 30) -> str:
    """``gpufleet top`` on a real terminal (a private tmux server) once every one of ``wants`` shows."""
    sock = f"gf-{uuid.uuid4().hex[:8]}"
    cmd = " ".join(shlex.quote(a) for a in [*gpufleet_argv(), "top", "-c", str(cfg), "--interval", "0.5"])
    await tmux_start(sock, cmd, width, height, tmux_env(home))
    try:
        return await pane_until(sock, *wants)
    finally:
        await tmux(sock, "kill-server")
