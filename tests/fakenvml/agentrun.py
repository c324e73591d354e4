"""Run the real gpufleet-agent against the fake libnvidia-ml.so.1 (a subprocess: pynvml finds the library
through LD_LIBRARY_PATH only at start-up), to completion or as a stream of decoded frames."""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpufleet.agent import wire

from tests.fakenvml import fakelib


def run_agent(
    agent_cmd: list[str], lib_dir: Path, state: Path, *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    """The agent to completion against the fake library in ``lib_dir`` driven by the state file ``state``;
    ``prefix`` runs it through another command first (setpriv: as another user)."""
    return subprocess.run(
        [*prefix, *agent_cmd, *args],
        env=fakelib.env_for(lib_dir, state),
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_once(agent_cmd: list[str], lib_dir: Path, state: Path, prefix: tuple[str, ...] = ()) -> wire.Snapshot:
    result = run_agent(agent_cmd, lib_dir, state, "--once", "--json", prefix=prefix)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    frame = wire.decode(lines[0])
    assert isinstance(frame, wire.Snapshot)
    return frame


class Stream:
    """A running agent; frames are decoded by a reader thread so a test never blocks forever."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.frames: queue.Queue[wire.Frame | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(wire.decode(line))
        self.frames.put(None)

    def next(self, timeout: float = 20.0) -> wire.Frame:
        frame = self.frames.get(timeout=timeout)
        assert frame is not None, "agent stream ended"
        return frame

    def until(self, accept: Callable[[wire.Frame], bool], limit: int = 100) -> list[wire.Frame]:
        """Frames up to and including the first one ``accept`` takes (at most ``limit``)."""
        seen: list[wire.Frame] = []
        for _ in range(limit):
            seen.append(self.next())
            if accept(seen[-1]):
                return seen
        raise AssertionError(f"no matching frame in {limit} frames")


@contextmanager
def streaming(agent_cmd: list[str], lib_dir: Path, state: Path, *args: str) -> Iterator[Stream]:
    proc = subprocess.Popen(
        [*agent_cmd, *args],
        env=fakelib.env_for(lib_dir, state),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Stream(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # EOF: the agent exits 0
        try:
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
