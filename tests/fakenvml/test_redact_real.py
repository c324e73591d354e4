"""Issue 12 item 9: secrets in command lines are masked by the agent, before anything leaves the host.

A real process with secrets on its command line holds a (fake-NVML) GPU; the real agent reads it from
/proc and prints its snapshot: no secret in the bytes it prints.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpufleet.agent import wire

from tests.fakenvml import fakelib

SECRETS = ("ROOTtoken12345", "hunter2", "pgsecret42", "urlsecret", "ghp_abcdef", "Bearer-xyz", "mine99")
ARGV = ["--api-token=ROOTtoken12345", "--password", "hunter2", "PGPASSWORD=pgsecret42",
        "https://bob:urlsecret@db.example/x", "https://ghp_abcdef@github.com/o/r", "-H",
        "Authorization: Bearer-xyz", "--lr", "0.1", "--mything=mine99"]


@pytest.fixture
def secret_process() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *ARGV],
                            stdin=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until exec is done and /proc shows the new command line
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().count(b"\0") > len(ARGV):
                break
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _agent(agent_cmd: list[str], lib: Path, state: Path, *args: str, **env: str) -> tuple[bytes, str]:
    res = subprocess.run([*agent_cmd, "--once", "--json", *args], env={**fakelib.env_for(lib, state), **env},
                         capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr.decode()
    frame = wire.decode(res.stdout)
    assert isinstance(frame, wire.Snapshot)
    command = frame.gpus[0].processes[0].command
    assert command is not None
    return res.stdout, command


def test_agent_prints_no_secret_from_a_real_command_line(agent_cmd: list[str], fake_nvml_dir: Path,
                                                         tmp_path: Path, secret_process: int) -> None:
    state = fakelib.default_state(1)
    state["gpus"][0]["processes"] = [{"pid": secret_process, "mem": 1 << 30}]
    path = fakelib.write_state(tmp_path / "state", state)
    raw, command = _agent(agent_cmd, fake_nvml_dir, path)
    for secret in SECRETS[:-1]:
        assert secret.encode() not in raw, secret
    assert ("--api-token=*** --password *** PGPASSWORD=*** https://bob:***@db.example/x "
            "https://***@github.com/o/r -H Authorization: *** --lr 0.1 --mything=mine99") in command
    # the words are configurable (an agent option, or the environment)
    _, custom = _agent(agent_cmd, fake_nvml_dir, path, "--redact-words", "mything")
    assert "--mything=***" in custom and "--api-token=ROOTtoken12345" in custom
    assert "https://bob:***@" in custom  # URL passwords are always masked
    _, from_env = _agent(agent_cmd, fake_nvml_dir, path, GPUFLEET_REDACT_WORDS="token,mything")
    assert "--mything=***" in from_env and "--api-token=***" in from_env and "--password hunter2" in from_env


@pytest.mark.parametrize(("argv", "masked"), [
    (["x", "--key", "-v"], ["x", "--key", "-v"]),  # the next argument is another option: nothing to mask
    (["AWS_SECRET_ACCESS_KEY=abc", "HOME=/root"], ["AWS_SECRET_ACCESS_KEY=***", "HOME=/root"]),
    (["DATABASE_URL=postgres://u:p@h/db"], ["DATABASE_URL=postgres://u:***@h/db"]),
    (["https://u:p@ss@h/x"], ["https://u:***@h/x"]),
    (["git@github.com:o/r", "ssh://host/x"], ["git@github.com:o/r", "ssh://host/x"]),
    (["--Passwd", "s"], ["--Passwd", "***"]),
])
def test_redactor_forms(argv: list[str], masked: list[str]) -> None:
    from gpufleet.agent.redact import Redactor

    assert Redactor().args(argv) == masked
