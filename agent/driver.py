"""Spot a driver upgrade that is installed but not loaded (the classic unattended-upgrade breakage).

The running agent keeps working: it mapped the old libnvidia-ml, which matches the loaded kernel module.
But every *new* CUDA or NVML process loads the new library from disk and fails with "Failed to initialize
NVML: Driver/library version mismatch" until the modules are reloaded or the host reboots. NVML cannot see
that from inside this process, so compare the library a new process would load (the version in the name
``libnvidia-ml.so.1`` resolves to, next to the one we mapped) with the loaded kernel module's version.

Paths are parameters so tests can build a fake tree. Any read error means "cannot tell" (None).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_PROC_VERSION = re.compile(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def mapped_library(maps: Path) -> str | None:
    """Path of the libnvidia-ml this process mapped (" (deleted)" stripped: the upgrade replaced it)."""
    for line in maps.read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "/libnvidia-ml.so" in parts[5]:
            return parts[5].removesuffix(" (deleted)")
    return None


def library_version(path: str) -> str | None:
    m = _LIB_VERSION.search(os.path.basename(path))
    return m.group(1) if m else None


def kernel_module_version(sys_module: Path, proc_version: Path) -> str | None:
    try:
        return (sys_module / "version").read_text().strip() or None
    except OSError:
        pass
    m = _PROC_VERSION.search(proc_version.read_text())
    return m.group(1) if m else None


def pending_upgrade(
    maps: str = "/proc/self/maps",
    sys_module: str = "/sys/module/nvidia",
    proc_version: str = "/proc/driver/nvidia/version",
) -> str | None:
    """A one-line explanation when new processes would hit a driver/library mismatch, else None."""
    try:
        lib = mapped_library(Path(maps))
        if lib is None:
            return None
        on_disk = library_version(os.path.realpath(os.path.join(os.path.dirname(lib), "libnvidia-ml.so.1")))
        kernel = kernel_module_version(Path(sys_module), Path(proc_version))
    except OSError:
        return None
    if on_disk is None or kernel is None or on_disk == kernel:
        return None
    return (
        f"driver/library version mismatch pending: libnvidia-ml {on_disk} is installed but kernel module "
        f"{kernel} is loaded; new CUDA/NVML processes fail until the nvidia modules are reloaded or the "
        "host reboots"
    )
