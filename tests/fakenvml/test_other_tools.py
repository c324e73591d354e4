"""gpustat and nvitop, the tools people run today, on the same simulated GPUs as gpufleet-agent: they run
without a traceback on the fake libnvidia-ml.so.1, and util, memory and the process list agree with
`gpufleet-agent --once --json` (issue 14.9)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpufleet.agent import wire

from tests.fakenvml import fakelib

GIB = 1 << 30
NVITOP_PROBE = """
import json
from nvitop import Device
out = []
for d in Device.all():
    out.append({"index": d.index, "util": d.gpu_utilization(), "mem_used": d.memory_used(),
                "pids": sorted(d.processes())})
print(json.dumps(out))
"""


@pytest.fixture
def busy_state(tmp_path: Path) -> Iterator[Path]:
    """Two GPUs: GPU 0 at 87 % with a real process holding 20 GiB, GPU 1 idle and empty."""
    holder = subprocess.Popen(["sleep", "300"])
    state = fakelib.default_state(2)
    state["gpus"][0].update(util=87, util_mem=40, mem_used=20 * GIB, util_enc=3,
                            processes=[{"pid": holder.pid, "mem": 20 * GIB, "sm": 80}])
    try:
        yield fakelib.write_state(tmp_path / "state", state)
    finally:
        holder.kill()
        holder.wait()


def _agent(agent_cmd: list[str], lib: Path, state: Path) -> wire.Snapshot:
    r = subprocess.run([*agent_cmd, "--once", "--json"], env=fakelib.env_for(lib, state), capture_output=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr.decode()
    frame = wire.decode(r.stdout.splitlines()[0])
    assert isinstance(frame, wire.Snapshot)
    return frame


def _tool(argv: list[str], lib: Path, state: Path) -> str:
    r = subprocess.run(argv, env={**fakelib.env_for(lib, state), "COLUMNS": "160"}, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr and "ERROR" not in r.stdout + r.stderr, r.stderr[-2000:]
    return r.stdout


def _expected(snap: wire.Snapshot) -> list[dict[str, Any]]:
    return [{"index": g.index, "util": g.util_gpu, "mem_mib": (g.memory_used or 0) // (1 << 20),
             "pids": sorted(p.pid for p in g.processes)} for g in snap.gpus]


def test_gpustat_agrees_with_the_agent(agent_cmd: list[str], fake_nvml_dir: Path, busy_state: Path) -> None:
    gpustat = shutil.which("gpustat", path=str(Path(sys.executable).parent))
    if gpustat is None:
        pytest.skip("gpustat is not installed (pip install gpustat; in the test extra)")
    data = json.loads(_tool([gpustat, "--json"], fake_nvml_dir, busy_state))
    got = [{"index": g["index"], "util": g["utilization.gpu"], "mem_mib": g["memory.used"],
            "pids": sorted(p["pid"] for p in g["processes"])} for g in data["gpus"]]
    assert got == _expected(_agent(agent_cmd, fake_nvml_dir, busy_state))
    assert data["gpus"][0]["utilization.enc"] == 3  # the encoder reading exists on the fake too


def test_nvitop_runs_and_agrees(agent_cmd: list[str], fake_nvml_dir: Path, busy_state: Path) -> None:
    nvitop = shutil.which("nvitop", path=str(Path(sys.executable).parent))
    if nvitop is None:
        pytest.skip("nvitop is not installed (pip install nvitop; in the test extra)")
    screen = _tool([nvitop, "-1"], fake_nvml_dir, busy_state)  # its one-shot screen: no missing function
    assert "A100-SXM4-80GB" in screen and "87%" in screen
    snap = _agent(agent_cmd, fake_nvml_dir, busy_state)
    data = json.loads(_tool([sys.executable, "-c", NVITOP_PROBE], fake_nvml_dir, busy_state))
    got = [{"index": d["index"], "util": d["util"], "mem_mib": d["mem_used"] // (1 << 20), "pids": d["pids"]}
           for d in data]
    assert got == _expected(snap)
