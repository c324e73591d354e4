"""The agent as a subprocess (`python -m gpufleet.agent`, as the collector runs it): frames, lifecycle."""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpufleet.agent import wire

from .conftest import agent_cmd

FAST_LOST = """
hostname: test-host
gpus:
  - {name: A, processes: [{pid: 11, user: alice, command: python a.py, memory_mib: 100, sm_util: 50}]}
  - {name: B}
timeline:
  - {at: 0.2, gpu: 1, xid: 79}
  - {at: 0.3, gpu: 1, event: lost}
"""

FAST_DRIVER = """
gpus:
  - {name: A}
timeline:
  - {at: 0.3, event: driver_error, code: DRIVER_NOT_LOADED, duration: 0.6}
"""


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class Agent:
    """A running agent subprocess with a deadline-bounded line reader."""

    def __init__(self, args: list[str], env: dict[str, str], stdin: int | None = subprocess.PIPE) -> None:
        self.proc = subprocess.Popen(
            agent_cmd(*args), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert self.proc.stdout is not None
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.lines: list[bytes] = []
        self.err = b""
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 65536):
            self.err += chunk

    def line(self, timeout: float = 20.0) -> bytes | None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise AssertionError("no line from the agent in time")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        self.lines.append(line + b"\n")
        return line + b"\n"

    def frames(self, n: int) -> list[wire.Frame]:
        out = []
        for _ in range(n):
            line = self.line()
            assert line is not None, "agent closed stdout early"
            out.append(wire.decode(line))
        return out

    def until(self, pred: Callable[[wire.Frame], bool], limit: int = 200) -> list[wire.Frame]:
        seen = []
        for _ in range(limit):
            frame = self.frames(1)[0]
            seen.append(frame)
            if pred(frame):
                return seen
        raise AssertionError(f"condition not met in {limit} frames")

    def rest(self, timeout: float = 20.0) -> tuple[int, bytes, bytes]:
        """Everything up to EOF on stdout (stdin stays open), then the exit code and all of stderr."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        out = self.buf
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise AssertionError("agent did not finish in time")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
        self.buf = b""
        code = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        self._drain.join(5)
        return code, out, self.err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                f.close()


Start = Callable[..., Agent]


@pytest.fixture
def run_agent(agent_env: dict[str, str]) -> Iterator[Start]:
    started: list[Agent] = []

    def start(*args: str, stdin: int | None = subprocess.PIPE) -> Agent:
        a = Agent(list(args), agent_env, stdin=stdin)
        started.append(a)
        return a

    yield start
    for a in started:
        a.kill()


def test_hello_then_snapshots_then_max_frames_exit(run_agent: Start) -> None:
    a = run_agent("--fake", "wasting", "--interval", "0.05", "--max-frames", "4", "-vv")
    code, out, err = a.rest()
    assert code == 0, err
    frames = [wire.decode(line) for line in out.splitlines(keepends=True)]  # every stdout line is a frame
    assert isinstance(frames[0], wire.Hello)
    assert frames[0].backend == "fake" and frames[0].hostname == "gpu-node-03" and len(frames[0].gpus) == 2
    snaps = [f for f in frames if isinstance(f, wire.Snapshot)]
    assert [s.seq for s in snaps] == [1, 2, 3, 4]
    assert frames[0].ts <= snaps[0].ts  # hello is written first, so it is not stamped later either
    assert all(isinstance(f, (wire.Snapshot, wire.Hello, wire.Heartbeat)) for f in frames)
    alice = snaps[0].gpus[0].processes[0]
    assert (alice.user, alice.pid, alice.gpu_memory) == ("alice", 31337, 40 << 30)
    assert b"DEBUG" in err or b"INFO" in err or err == b""  # logs (if any) went to stderr


def test_exits_0_when_stdin_closes(run_agent: Start) -> None:
    a = run_agent("--fake", "busy", "--interval", "0.05")
    hello, snap = a.frames(2)
    assert isinstance(hello, wire.Hello) and isinstance(snap, wire.Snapshot)
    assert a.proc.stdin is not None
    a.proc.stdin.close()
    code, out, err = a.rest()
    assert code == 0, err
    for line in out.splitlines(keepends=True):
        wire.decode(line)
    assert b"Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_exits_0_on_signal(run_agent: Start, sig: signal.Signals) -> None:
    a = run_agent("--fake", "idle", "--interval", "0.05")
    a.frames(2)
    a.proc.send_signal(sig)
    code, out, err = a.rest()
    assert code == 0, err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


def test_devnull_stdin_is_not_eof(run_agent: Start) -> None:
    a = run_agent("--fake", "idle", "--interval", "0.05", stdin=subprocess.DEVNULL)
    frames = a.frames(4)  # still running after several intervals although stdin is at EOF
    assert [type(f) for f in frames] == [wire.Hello] + [wire.Snapshot] * 3
    a.proc.terminate()
    assert a.rest()[0] == 0


def test_no_stdin_watch(run_agent: Start) -> None:
    a = run_agent("--fake", "idle", "--interval", "0.05", "--no-stdin-watch")
    a.frames(1)
    assert a.proc.stdin is not None
    a.proc.stdin.close()
    assert len(a.frames(3)) == 3 and a.proc.poll() is None
    a.proc.terminate()
    assert a.rest()[0] == 0


def test_broken_pipe_exits_quietly(run_agent: Start) -> None:
    a = run_agent("--fake", "busy", "--interval", "0.02", "--no-stdin-watch")
    a.frames(2)
    assert a.proc.stdout is not None
    a.sel.unregister(a.proc.stdout)
    a.proc.stdout.close()
    a.proc.wait(timeout=20)
    a._drain.join(5)
    err = a.err
    assert a.proc.returncode == 0, err
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_gpu_lost_and_xid_events(run_agent: Start, tmp_path: Path) -> None:
    sc = tmp_path / "lost.yaml"
    sc.write_text(FAST_LOST)
    a = run_agent("--fake", str(sc), "--interval", "0.05")
    seen = a.until(lambda f: isinstance(f, wire.Snapshot) and f.gpus[1].error is not None)
    events = [f for f in seen if isinstance(f, wire.Event)]
    more = a.frames(5)
    events += [f for f in more if isinstance(f, wire.Event)]
    assert sorted(e.kind for e in events) == ["gpu_lost", "xid"]  # one gpu_lost, not one per interval
    xid = next(e for e in events if e.kind == "xid")
    assert (xid.xid, xid.gpu_index) == (79, 1)
    last = [f for f in more if isinstance(f, wire.Snapshot)][-1]
    assert last.gpus[0].error is None and last.gpus[0].processes[0].user == "alice"
    assert last.gpus[1].error is not None


def test_driver_error_event_heartbeats_and_recovery(run_agent: Start, tmp_path: Path) -> None:
    sc = tmp_path / "driver.yaml"
    sc.write_text(FAST_DRIVER)
    a = run_agent("--fake", str(sc), "--interval", "0.05", "--heartbeat", "0.1")
    seen = a.until(lambda f: isinstance(f, wire.Event) and f.kind == "driver_error")
    assert isinstance(seen[-1], wire.Event) and "DRIVER_NOT_LOADED" in seen[-1].message
    after = a.until(lambda f: isinstance(f, wire.Snapshot))  # snapshots resume after re-init
    assert any(isinstance(f, wire.Heartbeat) for f in after)  # liveness during the outage
    assert sum(isinstance(f, wire.Event) and f.kind == "driver_error" for f in after) == 0
    seqs = [f.seq for f in seen + after if isinstance(f, wire.Snapshot)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    a.proc.terminate()
    assert a.rest()[0] == 0


def test_once_human_table(run_agent: Start) -> None:
    code, out, err = run_agent("--fake", "wasting", "--once").rest()
    assert code == 0, err
    text = out.decode()
    assert "gpu-node-03" in text and "alice" in text and "ipykernel_launcher" in text and "bob" in text
    assert "NVIDIA A100-SXM4-80GB" in text and "job=81234" in text


def test_once_json(run_agent: Start) -> None:
    code, out, err = run_agent("--fake", "zombie", "--once", "--json").rest()
    assert code == 0, err
    lines = out.splitlines(keepends=True)
    assert len(lines) == 1
    snap = wire.decode(lines[0])
    assert isinstance(snap, wire.Snapshot) and len(snap.gpus) == 2


def test_bad_scenario_exit_2(run_agent: Start, tmp_path: Path) -> None:
    sc = tmp_path / "bad.yaml"
    sc.write_text("gpus: [{memory_total_mib: -1}]\n")
    code, out, err = run_agent("--fake", str(sc)).rest()
    assert code == 2 and out == b""
    assert str(sc).encode() in err and b"gpus[0].memory_total_mib" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_arguments_exit_2(run_agent: Start) -> None:
    code, out, err = run_agent("--interval", "0").rest()
    assert code == 2 and out == b"" and b"must be > 0" in err


def test_version(run_agent: Start) -> None:
    code, out, _ = run_agent("--version").rest()
    assert code == 0 and out.startswith(b"gpufleet-agent ")


@pytest.mark.skipif(nvml_present(), reason="an NVML library is installed here")
def test_no_nvml_exit_2_with_one_line(run_agent: Start) -> None:
    code, out, err = run_agent("--interval", "0.1").rest()
    assert code == 2 and out == b""
    assert err.strip().splitlines() == [
        b"gpufleet-agent: NVML not available: libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
    ]


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """``code`` in the agent's interpreter and environment, to completion."""
    return subprocess.run(
        [*agent_cmd()[:1], "-c", code],
        capture_output=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_yaml_not_imported_without_fake(agent_env: dict[str, str]) -> None:
    code = (
        "import sys\n"
        "from gpufleet.agent.main import main\n"
        "main(['--once', '--json'])\n"
        "print('yaml' in sys.modules, file=sys.stderr)\n"
    )
    res = run_python(code, agent_env)
    assert res.stderr.strip().splitlines()[-1] == b"False"


def test_stray_output_cannot_reach_the_frame_stream(agent_env: dict[str, str]) -> None:
    """A library that prints (Python print or a raw write to fd 1) must not corrupt stdout."""
    code = (
        "import os, sys\n"
        "from gpufleet.agent import sampler, main\n"
        "orig = sampler.Sampler.sample\n"
        "def noisy(self):\n"
        "    print('python print from a library')\n"
        "    os.write(1, b'raw write to fd 1\\n')\n"
        "    return orig(self)\n"
        "sampler.Sampler.sample = noisy\n"
        "sys.exit(main.main(['--fake', 'idle', '--interval', '0.05', '--max-frames', '3']))\n"
    )
    res = run_python(code, agent_env)
    assert res.returncode == 0, res.stderr
    frames = [wire.decode(line) for line in res.stdout.splitlines(keepends=True)]
    assert [type(f) for f in frames] == [wire.Hello] + [wire.Snapshot] * 3
    assert b"python print from a library" in res.stderr and b"raw write to fd 1" in res.stderr
