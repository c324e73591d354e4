"""A real collector (store, rules, query API, /metrics) over local hosts that run scripted agents."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import (
    ApiConfig,
    Config,
    HostConfig,
    MetricsConfig,
    StorageConfig,
    default_rules,
)
from gpufleet.collector.store.store import Tuning

AGENT = Path(__file__).parent / "hostile_agent.py"


def line(obj: dict[str, Any]) -> str:
    """One frame as the agent would print it (ASCII-escaped JSON, so lone surrogates survive as text)."""
    return json.dumps(obj)


def snapshot(uuid: str, *, ts: float | str = "@NOW@", seq: int = 1, **gpu: Any) -> str:
    g = {"index": 0, "uuid": uuid, "util_gpu": 40, "memory_used": 2 << 30, "memory_total": 80 << 30, **gpu}
    text = line({"type": "snapshot", "proto": "1.0", "ts": 0.0, "seq": seq, "gpus": [g]})
    return text.replace('"ts": 0.0', f'"ts": {ts}')


def host(name: str, script: Path, *, ts_offset: float = 0.0, interval: float = 0.1,
         repeat: bool = False, flood: float = 0.0) -> HostConfig:
    argv = [sys.executable, str(AGENT), "--script", str(script), "--uuid", f"GPU-{name}-0",
            "--ts-offset", repr(ts_offset)]
    cmd = shlex.join(argv + (["--repeat"] if repeat else []) + (["--flood", repr(flood)] if flood else []))
    return HostConfig(name=name, transport="local", agent_command=cmd, interval=interval)


class Fleet:
    def __init__(self, collector: Collector, home: Path) -> None:
        self.collector = collector
        self.home = home

    async def wait(self, cond: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)

    def state(self, name: str) -> Any:
        return self.collector.live.hosts[name]

    async def metrics(self) -> tuple[int, str]:
        return await http_get(f"http://127.0.0.1:{self.collector.metrics_port}/metrics")


async def http_get(url: str, timeout: float = 20.0) -> tuple[int, str]:
    """(status, body) of a GET on loopback, from a thread (the collector under test shares this loop)."""
    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
    return await asyncio.to_thread(get)


@asynccontextmanager
async def collector_over(scripts: dict[str, Iterable[str]], *, ts_offsets: dict[str, float] | None = None,
                         repeat: Iterable[str] = (), floods: dict[str, float] | None = None,
                         accrue_interval: float = 0.0, **config: Any) -> AsyncIterator[Fleet]:
    """A started collector with one local host per script (name -> frame lines); hosts in ``repeat`` keep
    printing their script's last line. GPU-hours and spans reach the file with every batch
    (``accrue_interval`` 0; the daemon's is 60 s), so a test that reads the file waits for no interval."""
    home = Path(tempfile.mkdtemp(prefix="gfhost-", dir="/tmp"))
    hosts = []
    for name, lines in scripts.items():
        path = home / f"{name}.jsonl"
        path.write_text("".join(f"{ln}\n" for ln in lines))
        hosts.append(host(name, path, ts_offset=(ts_offsets or {}).get(name, 0.0),
                          repeat=name in set(repeat), flood=(floods or {}).get(name, 0.0)))
    cfg = Config(hosts=hosts, storage=StorageConfig(path=str(home / "db.sqlite")),
                 api=ApiConfig(socket=str(home / "run" / "gpufleet.sock")),
                 metrics=MetricsConfig("127.0.0.1:0"), rules=default_rules(), **config)
    collector = Collector(cfg, store_tuning=dataclasses.replace(Tuning.for_fleet(len(hosts)),
                                                                accrue_interval=accrue_interval))
    await collector.start()
    try:
        yield Fleet(collector, home)
    finally:
        await collector.stop()
        shutil.rmtree(home, ignore_errors=True)
