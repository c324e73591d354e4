"""Helpers shared by the transport tests."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.agent import wire
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample

if TYPE_CHECKING:
    from gpufleet.collector.transport.manager import FleetTransport

HERE = Path(__file__).parent
STANDIN = [sys.executable, str(HERE / "standin_agent.py")]
REAL = [sys.executable, "-m", "gpufleet.agent"]
FAST = {"backoff_base": 0.05, "backoff_cap": 0.3}


@functools.cache
def real_agent_works() -> bool:
    """The real agent, once it streams with the fake backend; until then the stand-in."""
    try:
        proc = subprocess.Popen([*REAL, "--fake", "busy", "--interval", "0.1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return False
    guard = threading.Timer(20.0, proc.kill)  # a silent agent must not hang the session
    guard.start()
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        proc.stdin.close()
        proc.wait(timeout=20)
        return isinstance(wire.decode(first), wire.Hello)
    except (wire.WireError, subprocess.TimeoutExpired):
        proc.kill()
        return False
    finally:
        guard.cancel()
        proc.wait()


class CollectingSink:
    """Records every state change and frame, and lets a test wait for a condition."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, sample.Frame, float]] = []
        self.changes: list[tuple[str, str, str | None]] = []
        self.latest: dict[str, HostState] = {}

    def host_state(self, state: HostState) -> None:
        self.changes.append((state.name, state.status, state.reason))
        self.latest[state.name] = state

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        self.frames.append((host, frame, received))

    def count(self, host: str, kind: str | None = None) -> int:
        return sum(1 for h, f, _ in self.frames if h == host and (kind is None or f.type == kind))

    def statuses(self, host: str) -> list[str]:
        return [s for h, s, _ in self.changes if h == host]

    def reasons(self, host: str) -> list[str]:
        return [r for h, s, r in self.changes if h == host and s == "down" and r]

    async def wait_for(self, cond: Callable[[], bool], timeout: float = 20.0,
                       what: str = "condition") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not cond():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; changes: {self.changes[-12:]}")
            await asyncio.sleep(0.02)




#: The ``transport_for`` fixture: builds a FleetTransport with fast backoff, stopped after the test.
MakeTransport = Callable[..., "FleetTransport"]
