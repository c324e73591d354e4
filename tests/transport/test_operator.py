"""What an operator does: serve a simulated fleet from another process, write its gpufleet.yaml, run
``gpufleet collector run -c FILE``, then ``gpufleet -c FILE hosts``. Real processes, real SSH on loopback."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpufleet.collector.config import load_config
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.manager import quiet_asyncssh

from tests.transport.sshtestlib import CollectingSink, MakeTransport

GPUFLEET = [sys.executable, "-m", "gpufleet.cli.main"]


def _gpufleet() -> list[str]:
    beside = Path(sys.executable).with_name("gpufleet")
    return [str(beside)] if beside.exists() else GPUFLEET


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, object]]]:
    """``python -m gpufleet.collector.simfleet`` started the way a shell's ``&`` does: stdin is /dev/null."""
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.collector.simfleet", "--hosts", "2", "--mode",
                             "inproc", "--interval", "0.2", "--dir", str(tmp_path / "fleet"),
                             "--config", str(tmp_path / "gpufleet.yaml")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        desc = json.loads(proc.stdout.readline())
        yield proc, desc
    finally:
        _stop(proc)


def test_simfleet_writes_a_config_and_keeps_serving_without_stdin(
        served: tuple[subprocess.Popen[bytes], dict[str, object]], tmp_path: Path) -> None:
    proc, desc = served
    assert desc["config"] == str(tmp_path / "gpufleet.yaml")
    cfg = load_config(tmp_path / "gpufleet.yaml")
    assert [h.name for h in cfg.hosts] == ["sim-001", "sim-002"]
    assert all(h.port > 0 and h.host_key_policy == "strict" and h.agent_args == ["--fake", "busy"]
               for h in cfg.hosts)
    assert cfg.storage.resolved_path() == tmp_path / "fleet" / "fleet.db"
    time.sleep(0.5)
    assert proc.poll() is None  # /dev/null on stdin is not "the parent went away"
    assert _stop(proc) == 0


def test_collector_run_then_hosts(served: tuple[subprocess.Popen[bytes], dict[str, object]],
                                  tmp_path: Path) -> None:
    config = str(tmp_path / "gpufleet.yaml")
    env = {**os.environ, "COLUMNS": "160"}
    collector = subprocess.Popen([*_gpufleet(), "collector", "run", "-c", config], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            out = subprocess.run([*_gpufleet(), "-c", config, "hosts", "--json"], capture_output=True,
                                 env=env, timeout=30)
            if out.returncode == 0 and b"not running" not in out.stderr:
                rows = json.loads(out.stdout)
                if len(rows) == 2 and all(r["status"] == "up" for r in rows):
                    break
            time.sleep(0.3)
        assert sorted(str(r["name"]) for r in rows) == ["sim-001", "sim-002"], rows
        assert all(r["status"] == "up" for r in rows), rows
    finally:
        assert _stop(collector) == 0
    assert collector.stderr is not None
    log = collector.stderr.read().decode()
    assert "sim-001: up (agent sim" in log and "sim-002: up (agent sim" in log
    # asyncssh's own ten lines per connection stay out of the operator's log at the default level
    assert " INFO asyncssh" not in log, log[:2000]


async def test_asyncssh_info_is_quiet_unless_debug(sink: CollectingSink, transport_for: MakeTransport,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    ssh_log = logging.getLogger("asyncssh")
    saved, root_saved = ssh_log.level, logging.getLogger().level
    try:
        ssh_log.setLevel(logging.NOTSET)
        logging.getLogger().setLevel(logging.DEBUG)
        quiet_asyncssh()
        assert ssh_log.level == logging.NOTSET  # debug logging keeps everything
        logging.getLogger().setLevel(logging.INFO)
        async with SimFleet(1, mode="inproc", interval=0.1) as fleet:
            caplog.set_level(logging.INFO)
            caplog.clear()  # the fleet's own listener logged before the transport quieted asyncssh
            t = transport_for(fleet.host_configs(), sink)
            await t.start()
            await sink.wait_for(lambda: t.states()["sim-001"].status == "up")
            assert ssh_log.level == logging.WARNING
            names = {r.name.split(".")[0] for r in caplog.records}
            assert "asyncssh" not in names and any("sim-001: up" in r.getMessage() for r in caplog.records)
        ssh_log.setLevel(logging.ERROR)
        quiet_asyncssh()
        assert ssh_log.level == logging.ERROR  # an explicit choice is kept
    finally:
        ssh_log.setLevel(saved)
        logging.getLogger().setLevel(root_saved)
