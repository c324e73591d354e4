"""tests/gpu_check.sh, with the fake NVML behind the agent and a stand-in nvidia-smi printing CSV."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml import fakelib

SCRIPT = Path(__file__).resolve().parent.parent / "gpu_check.sh"
FAKE_SMI = """#!/bin/sh
# stand-in nvidia-smi: -L lists GPUs, --query-gpu prints the CSV file named by $FAKE_SMI_CSV
case "$1" in
  -L) echo "GPU 0: fake"; exit 0 ;;
  --query-gpu=*) cat "$FAKE_SMI_CSV"; exit 0 ;;
esac
exit 9
"""


def smi_rows() -> list[list[str]]:
    """What a real nvidia-smi would print for the default state (MiB, W, MHz, no units)."""
    rows = []
    for i in range(2):
        g = fakelib.default_gpu(i)
        rows.append(
            [
                str(i),
                g["uuid"],
                g["name"],
                str(g["mem_total"] >> 20),
                "0",
                "0",
                "33",
                "61.00",
                "400.00",
                "210",
                "1593",
            ]
        )
    return rows


def run_check(
    tmp_path: Path, agent_cmd: list[str], lib_dir: Path, rows: list[list[str]] | None
) -> subprocess.CompletedProcess[str]:
    state = fakelib.write_state(tmp_path / "state", fakelib.default_state(2))
    env = fakelib.env_for(lib_dir, state)
    env["GPUFLEET_AGENT"] = " ".join(agent_cmd)
    env["PYTHON"] = sys.executable
    if rows is not None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(FAKE_SMI)
        smi.chmod(0o755)
        (tmp_path / "smi.csv").write_text("".join(", ".join(r) + "\n" for r in rows))
        env["FAKE_SMI_CSV"] = str(tmp_path / "smi.csv")
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_agreement_passes(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    rows = smi_rows()
    rows[1][4] = str(fakelib.default_gpu(1)["mem_reserved"] >> 20)  # a driver that counts reserved as used
    result = run_check(tmp_path, agent_cmd, fake_nvml_dir, rows)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu_check: PASS" in result.stdout
    assert result.stdout.count(" ok") == 2 * 10


def test_disagreement_fails_and_says_where(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    rows = smi_rows()
    rows[1][2] = "NVIDIA H100 80GB HBM3"  # name: exact field
    rows[0][6] = "45"  # temperature off by 12 C: beyond the live tolerance
    rows[0][7] = "[N/A]"  # power.draw: the agent has it, nvidia-smi does not
    rows[0][5] = "9"  # utilization within 15 points: still ok
    result = run_check(tmp_path, agent_cmd, fake_nvml_dir, rows)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:2] == ["1", "name"] and "DIFFERS" in line for line in lines)
    assert any(line.split()[:2] == ["0", "temperature.gpu"] and "DIFFERS" in line for line in lines)
    assert any(line.split()[:2] == ["0", "power.draw"] and "MISSING in nvidia-smi" in line for line in lines)
    assert any(line.split()[:2] == ["0", "utilization.gpu"] and line.endswith("ok") for line in lines)
    assert "FAIL (3 disagreements)" in result.stdout


def test_no_nvidia_smi_is_skipped(agent_cmd: list[str], fake_nvml_dir: Path, tmp_path: Path) -> None:
    if shutil.which("nvidia-smi", path=os.environ.get("PATH")):
        pytest.skip("a real nvidia-smi is installed here")
    result = run_check(tmp_path, agent_cmd, fake_nvml_dir, None)
    assert result.returncode == 77 and "skipped" in result.stdout
