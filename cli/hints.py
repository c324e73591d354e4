"""What to run next, said so that it works on this machine (issue 36: after the demo, ``gpufleet collector
run`` on a machine with no GPU showed nothing but this machine, down).

Standard library only: every command may import it (the "collector not running" message is one).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: present while an NVIDIA kernel driver is loaded (the file nvidia-smi and NVML read too)
DRIVER_PROC = Path("/proc/driver/nvidia/version")
CONFIG = "gpufleet.yaml"


def nvidia_driver_loaded(proc: Path = DRIVER_PROC) -> bool:
    return proc.exists()


def example_config() -> Path | None:
    """The commented example config: installed with the wheel (``<prefix>/share/gpufleet/deploy``), or in
    the source checkout this package runs from."""
    for candidate in (Path(sys.prefix) / "share" / "gpufleet" / "deploy" / CONFIG,
                      Path(__file__).resolve().parents[1] / "deploy" / CONFIG):
        if candidate.is_file():
            return candidate
    return None


def start_hint(proc: Path = DRIVER_PROC) -> str:
    """How to get a collector going here: on a GPU machine, one that watches it; elsewhere, one that
    watches the GPU hosts a config lists (a collector with no config here would only see this machine,
    down)."""
    if nvidia_driver_loaded(proc):
        return "start one with `gpufleet collector run` (it watches this machine's GPUs)"
    example = example_config()
    where = f"copy {example}" if example is not None else "start from deploy/gpufleet.yaml"
    return (f"this machine has no NVIDIA driver, so watch your GPU hosts over SSH: {where} to {CONFIG}, "
            f"list them under hosts:, then `gpufleet config check -c {CONFIG}` and "
            f"`gpufleet collector run -c {CONFIG}` (or try `gpufleet demo`)")
