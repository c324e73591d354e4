"""tests/gpu_check.sh end to end without a GPU: the fake libnvidia-ml.so.1 behind the agent, a stand-in
nvidia-smi reading the same state (fake_smi.py), both nvidia-ml-py wheels (tests/gpu_wheels.sh; .ci/run
fetches them). The workload checks skip here for want of libcuda.so.1; everything else runs as on a GPU."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml import fakelib

TESTS = Path(__file__).resolve().parent.parent
SCRIPT = TESTS / "gpu_check.sh"
WHEELS = Path(os.environ.get("GPU_CHECK_WHEELS", TESTS / "wheels"))
FAKE_SMI = Path(__file__).with_name("fake_smi.py")

pytestmark = pytest.mark.slow


def hopper_state() -> dict[str, Any]:
    state = fakelib.default_state(2)
    state["gpus"][0].update(util=35, util_mem=12, mem_used=9 << 30, sm_active=30, throttle=0x4,
                            processes=[{"pid": os.getpid(), "mem": 9 << 30, "sm": 35}])
    state["gpus"][1].update(name="NVIDIA H100 80GB HBM3", sm_active=0)
    return state


def run_check(tmp_path: Path, lib_dir: Path, state: dict[str, Any] | None,
              **env_extra: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    path = fakelib.write_state(home / "state", state or hopper_state())
    path.chmod(0o644)
    lib = home / "lib"
    shutil.copytree(lib_dir, lib)
    for p in [tmp_path, home, lib, *lib.iterdir()]:
        p.chmod(0o755)  # the unprivileged check (as nobody) loads the same library and state
    env = fakelib.env_for(lib, path)
    env["PYTHON"] = sys.executable
    env["GPU_CHECK_WHEELS"] = str(WHEELS)
    env.update(env_extra)
    bin_dir = home / "bin"
    bin_dir.mkdir()
    if state is not None or "NO_SMI" not in env_extra:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SMI} \"$@\"\n")
        smi.chmod(0o755)
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin"
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture
def wheels() -> Path:
    if len(list(WHEELS.glob("nvidia_ml_py-*.whl"))) < 2:
        pytest.skip(f"no nvidia-ml-py wheels in {WHEELS}: run tests/gpu_wheels.sh (.ci/run does)")
    return WHEELS


def lines(result: subprocess.CompletedProcess[str], kind: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(kind)]


def test_every_check_passes_on_the_fake_with_the_workload_skipped(
        wheels: Path, fake_nvml_dir: Path, tmp_path: Path) -> None:
    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is installed here: the workload would run on the real GPU")
    result = run_check(tmp_path, fake_nvml_dir, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result, "FAIL") == []
    versions = {line.split("[", 1)[1].split("]", 1)[0] for line in lines(result, "PASS")}
    assert {v.split()[1] for v in versions if " as " not in v} == {
        w.name.split("-")[1] for w in wheels.glob("nvidia_ml_py-*.whl")}, "both releases were checked"
    skipped = lines(result, "SKIP")
    assert all("workload" in s for s in skipped), skipped
    passed = "\n".join(lines(result, "PASS"))
    for check in ("stream hello", "stream seq", "stream stderr", "stream GPM", "field pci.bus_id",
                  "field ecc.errors.uncorrected.volatile.total", "field temperature thresholds",
                  "field clocks_event_reasons.active", "field mig.mode.current", "unprivileged --once"):
        assert check in passed, check
    assert result.stdout.splitlines()[-1].startswith("gpu_check: PASS (")


def test_a_disagreement_fails_and_says_where(wheels: Path, fake_nvml_dir: Path, tmp_path: Path) -> None:
    result = run_check(tmp_path, fake_nvml_dir, None, FAKE_SMI_OVERRIDE="serial=0000,temperature.gpu=90")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = lines(result, "FAIL")
    assert any("field serial" in f and "nvidia-smi '0000'" in f for f in failed), failed
    assert any("field temperature.gpu" in f for f in failed), failed
    assert result.stdout.splitlines()[-1].startswith("gpu_check: FAIL (")


def test_no_gpu_is_a_skip(fake_nvml_dir: Path, tmp_path: Path) -> None:
    if shutil.which("nvidia-smi", path="/usr/bin:/bin:/usr/sbin:/sbin"):
        pytest.skip("a real nvidia-smi is installed here")
    result = run_check(tmp_path, fake_nvml_dir, None, NO_SMI="1")
    assert result.returncode == 77 and "skipped" in result.stdout
