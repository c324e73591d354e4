"""The real ``gpufleet-agent`` streaming from the fake libnvidia-ml.so.1, for tests of what it reads from
other real host parts (a real Slurm's cgroups and scontrol, the kubelet's directories, real cgroups).

The fake library (tests/fakenvml) lists whatever pids a test writes into its state file, so a test can put
a real process (a Slurm job step, a process in a pod's cgroup) on a GPU. Frames are read by a thread and
every wait is bounded.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from gpufleet.agent import wire

from tests.fakenvml import fakelib  # noqa: E402


def agent_cmd() -> list[str]:
    """The installed ``gpufleet-agent`` console script (else ``python -m gpufleet.agent``)."""
    exe = Path(sys.executable).with_name("gpufleet-agent")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpufleet.agent"]


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake library's directory, built once per session (skips where gcc is missing). A conftest that
    imports this name offers the fixture to its directory."""
    if not fakelib.have_gcc():
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    return fakelib.build(tmp_path_factory.mktemp("fakenvml-lib"))


class AgentStream:
    """A running agent's snapshots. A thread moves its stdout lines to a queue (b"" at EOF), so a wait is
    bounded even when the agent writes nothing."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while line := out.readline():
            self.lines.put(line)
        self.lines.put(b"")

    def snapshot_where(self, accept: Callable[[wire.Snapshot], bool], timeout: float = 30.0) -> wire.Snapshot:
        """The first snapshot ``accept`` takes; fails after ``timeout`` seconds with the last one seen."""
        deadline = time.monotonic() + timeout
        last: wire.Snapshot | None = None
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if not line:
                raise AssertionError(f"the agent exited ({self.proc.poll()}); last snapshot: {last}")
            frame = wire.decode(line)
            if isinstance(frame, wire.Snapshot):
                last = frame
                if accept(frame):
                    return frame
        raise AssertionError(f"no matching snapshot in {timeout:g} s; last: {last}")


@contextmanager
def streaming(lib_dir: Path, state: Path, *args: str, env: Mapping[str, str] | None = None,
              stderr: Path | None = None) -> Iterator[AgentStream]:
    """The agent on the fake library with ``state``, its stdin a pipe: EOF at the end, and it must exit 0
    (its stderr goes to ``stderr``, quoted when it does not)."""
    with open(stderr if stderr is not None else os.devnull, "wb") as err:
        proc = subprocess.Popen([*agent_cmd(), *args], env=fakelib.env_for(lib_dir, state, env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        yield AgentStream(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        said = stderr.read_text(errors="replace")[-2000:] if stderr is not None else ""
        assert code == 0, f"the agent exited {code} after stdin EOF: {said}"
