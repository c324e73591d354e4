"""An installed-but-not-loaded driver upgrade: new CUDA processes would fail, the running agent would not."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent.driver import pending_upgrade

from .conftest import Env

MAPS = "7f0000000000-7f0000100000 r-xp 00000000 08:01 123 {path}\n"
PROC_VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Thu Feb 22 01:44:30 UTC 2024\n"


def host(
    tmp_path: Path, loaded: str, installed: str, deleted: bool = False, sysfs: bool = True
) -> dict[str, str]:
    """A lib dir where libnvidia-ml.so.1 points at ``installed`` while this process mapped ``loaded``."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for v in {loaded, installed}:
        (lib / f"libnvidia-ml.so.{v}").write_bytes(b"\x7fELF")
    os.symlink(f"libnvidia-ml.so.{installed}", lib / "libnvidia-ml.so.1")
    mapped = f"{lib}/libnvidia-ml.so.{loaded}" + (" (deleted)" if deleted else "")
    (tmp_path / "maps").write_text("00400000-00452000 r-xp 00000000 08:01 1 /usr/bin/python3.11\n"
                                   + MAPS.format(path=mapped))
    (tmp_path / "nvidia").mkdir()
    if sysfs:
        (tmp_path / "nvidia" / "version").write_text(loaded + "\n")
    (tmp_path / "proc_version").write_text(PROC_VERSION.format(v=loaded))
    return {"maps": str(tmp_path / "maps"), "sys_module": str(tmp_path / "nvidia"),
            "proc_version": str(tmp_path / "proc_version")}


def test_upgrade_installed_not_loaded(tmp_path: Path) -> None:
    msg = pending_upgrade(**host(tmp_path, "550.54.15", "550.90.07", deleted=True))
    assert msg is not None and "mismatch" in msg
    assert "550.90.07 is installed" in msg and "kernel module 550.54.15 is loaded" in msg


def test_proc_driver_version_when_sysfs_is_absent(tmp_path: Path) -> None:
    msg = pending_upgrade(**host(tmp_path, "535.161.08", "550.54.15", sysfs=False))
    assert msg is not None and "kernel module 535.161.08" in msg


def test_consistent_driver_is_quiet(tmp_path: Path) -> None:
    assert pending_upgrade(**host(tmp_path, "550.54.15", "550.54.15")) is None


def test_cannot_tell_is_quiet(tmp_path: Path) -> None:
    (tmp_path / "maps").write_text("00400000-00452000 r-xp 00000000 08:01 1 /usr/bin/python3.11\n")
    assert pending_upgrade(maps=str(tmp_path / "maps")) is None  # NVML not mapped (fake backend)
    assert pending_upgrade(maps=str(tmp_path / "absent")) is None


def test_sampler_reports_each_pending_mismatch_once(make_env: Callable[..., Env]) -> None:
    problem: list[str | None] = ["driver/library version mismatch pending: A"]
    env = make_env("gpus: [{name: A}]\n", slow_every=30.0, driver_check=lambda: problem[0])
    _, events = env.sampler.sample()
    assert [(e.kind, e.message, e.gpu_index) for e in events] == [("driver_error", problem[0], None)]
    env.clock.advance(31)
    assert env.sampler.sample()[1] == []  # still pending: not repeated
    problem[0] = "driver/library version mismatch pending: B"
    env.clock.advance(10)
    assert env.sampler.sample()[1] == []  # checked in the slow tier only
    env.clock.advance(21)
    assert [e.message for e in env.sampler.sample()[1]] == [problem[0]]
    problem[0] = None
    env.clock.advance(31)
    assert env.sampler.sample()[1] == []
