"""Build the fake ``libnvidia-ml.so.1`` and write the state file that drives it.

The real pynvml dlopens ``libnvidia-ml.so.1`` through the normal search path, so the library directory has
to be on ``LD_LIBRARY_PATH`` *before* the process starts: always run pynvml (or the agent) in a subprocess
with :func:`env_for`. The state is a small dict (see :func:`default_gpu`) rendered to ``key value`` lines
that the C side re-reads whenever the file changes, so a test can change the GPUs while the agent runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

SOURCE: Final = Path(__file__).with_name("fake_nvml.c")
LIB_NAME: Final = "libnvidia-ml.so.1"
STATE_ENV: Final = "GPUFLEET_FAKE_NVML_STATE"
CFLAGS: Final = ("-shared", "-fPIC", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror")

#: Feature names accepted by ``unsupported`` / ``noperm`` / ``fail`` (each gates the NVML calls named).
FEATURES: Final = (
    "name",
    "uuid",
    "serial",
    "pci",
    "util",
    "memory",
    "memory_v2",
    "temperature",
    "thresholds",
    "power",
    "power_limit",
    "clocks",
    "throttle",
    "fan",
    "ecc",
    "mig",
    "processes",
    "graphics_processes",
    "process_util",
    "events",
    "handle",
    "mps_processes",
    "remapped_rows",
    "energy",
    "field_values",
)
#: Numeric GPU keys (absent or None: the call answers NVML_ERROR_NOT_SUPPORTED).
GPU_NUMBERS: Final = (
    "util",
    "util_mem",
    "mem_total",
    "mem_used",
    "mem_reserved",
    "temp",
    "temp_shutdown",
    "temp_slowdown",
    "temp_mem_max",
    "temp_gpu_max",
    "power_mw",
    "power_limit_mw",
    "clock_graphics",
    "clock_sm",
    "clock_mem",
    "clock_video",
    "throttle",
    "fan",
    "ecc_corrected",
    "ecc_uncorrected",
    "ecc_agg_corrected",
    "ecc_agg_uncorrected",
    "mig",
    "mig_pending",
    "mig_max",
    "pci_domain",
    "pci_bus",
    "pci_device",
    "pci_device_id",
    "pci_subsys",
    "event_types",
    "lost",
    "util_enc",
    "util_dec",
    "pstate",
    "persistence",
    "compute_mode",
    "display_active",
    "sm_active",
    "tensor_active",
    "dram_active",
    "temp_hbm",
    "recovery_action",
    "remap_corr",
    "remap_unc",
    "remap_pending",
    "remap_failed",
    "energy_mj",
    "hang",
)
GPU_STRINGS: Final = ("name", "uuid", "serial", "pci_bus_id")
GPU_LISTS: Final = ("processes", "mig_instances", "unsupported", "noperm", "fail")
PROC_KEYS: Final = ("pid", "mem", "sm", "memutil", "enc", "dec", "type", "gi", "ci")
MIG_KEYS: Final = ("gi", "ci", "name", "uuid", "mem_total", "mem_used", "mem_reserved")
SYSTEM_KEYS: Final = ("driver", "nvml", "cuda", "init_error", "gpu_count", "gpus", "xids")

NVML_EVENT_XID: Final = 0x8
GIB: Final = 1 << 30


class FakeNvmlError(Exception):
    """The fake library could not be built, or a state dict is malformed."""


def have_gcc() -> bool:
    return shutil.which("gcc") is not None


def exported_symbols() -> frozenset[str]:
    """Every NVML entry point the C source defines (the names ``omit`` may name), the process-list calls
    its PROCESS_CALLS macro writes included."""
    text = SOURCE.read_text()
    plain = re.findall(r"^(?:nvmlReturn_t|const char \*)\s*(nvml\w+)\(", text, flags=re.M)
    names = re.findall(r"^PROCESS_CALLS\((\w+),", text, flags=re.M)
    lists = [f"nvmlDeviceGet{n}RunningProcesses{suffix}" for n in names for suffix in ("", "_v2", "_v3")]
    return frozenset(plain + lists)


def build(out_dir: Path, omit: Iterable[str] = ()) -> Path:
    """Compile the library (once per source/omit combination) and return the directory holding it.

    ``omit`` names symbols to leave out of the dynamic symbol table, so pynvml raises
    NVMLError_FunctionNotFound for them, as with an older driver.
    """
    omitted = tuple(sorted(set(omit)))
    unknown = set(omitted) - exported_symbols()
    if unknown:
        raise FakeNvmlError(f"cannot omit {sorted(unknown)}: fake_nvml.c does not define them")
    digest = hashlib.sha256(SOURCE.read_bytes() + repr((omitted, CFLAGS)).encode()).hexdigest()[:16]
    lib_dir = Path(out_dir) / f"fakenvml-{digest}"
    if (lib_dir / LIB_NAME).exists():
        return lib_dir
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FakeNvmlError("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    lib_dir.mkdir(parents=True, exist_ok=True)
    tmp = lib_dir / f".{LIB_NAME}.{os.getpid()}.tmp"
    cmd = [gcc, *CFLAGS, "-o", str(tmp), str(SOURCE), "-pthread", "-ldl"]
    if omitted:
        # an exact name in `local:` beats the `*` wildcard in `global:` (GNU ld version-script rules)
        script = lib_dir / "omit.map"
        script.write_text("{ global: *; local: " + " ".join(f"{s};" for s in omitted) + " };\n")
        cmd.append(f"-Wl,--version-script={script}")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FakeNvmlError(f"gcc failed building {SOURCE} (exit {result.returncode}):\n{result.stderr}")
    os.replace(tmp, lib_dir / LIB_NAME)
    return lib_dir


def env_for(lib_dir: Path, state_path: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment in which a *new* process loads the fake library and reads ``state_path``."""
    env = dict(os.environ if base is None else base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (f":{old}" if old else "")
    env[STATE_ENV] = str(state_path)
    return env


# ------------------------------------------------------------------------------------------------ state


def default_gpu(index: int) -> dict[str, Any]:
    """An idle A100-SXM4-80GB where every reading is present (override keys, or set None to drop one)."""
    bus = 0x07 + 0x10 * index
    return {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": f"GPU-fa4e{index:04x}-0000-4000-8000-{index:012x}",
        "serial": f"1321021{index:06d}",
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "pci_domain": 0,
        "pci_bus": bus,
        "pci_device": 0,
        "pci_device_id": 0x20B210DE,
        "pci_subsys": 0x147F10DE,
        "util": 0,
        "util_mem": 0,
        "mem_total": 80 * GIB,
        "mem_used": 0,
        "mem_reserved": 540 << 20,
        "temp": 33,
        "temp_shutdown": 92,
        "temp_slowdown": 89,
        "temp_mem_max": 95,
        "temp_gpu_max": 87,
        "power_mw": 61_000,
        "power_limit_mw": 400_000,
        "clock_graphics": 210,
        "clock_sm": 210,
        "clock_mem": 1593,
        "clock_video": 795,
        "throttle": 0x1,  # GPU idle
        "fan": 30,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "ecc_agg_corrected": 0,
        "ecc_agg_uncorrected": 0,
        "mig": 0,
        "mig_max": 7,
        "event_types": 0x1F,  # single/double-bit ECC, P-state, Xid, clock
        "util_enc": 0,
        "util_dec": 0,
        "pstate": 0,
        "persistence": 1,
        "compute_mode": 0,  # default
        "display_active": 0,
        "processes": [],
    }


def default_state(gpus: int = 2) -> dict[str, Any]:
    return {
        "driver": "550.54.15",
        "nvml": "12.550.54.15",
        "cuda": 12040,
        "gpus": [default_gpu(i) for i in range(gpus)],
        "xids": [],
    }


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value:
            raise FakeNvmlError(f"{where}: value may not contain a newline")
        return value
    raise FakeNvmlError(f"{where}: expected int, bool or str, got {type(value).__name__}")


def _check_keys(obj: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    unknown = set(obj) - set(allowed)
    if unknown:
        raise FakeNvmlError(f"{where}: unknown keys {sorted(unknown)}")


def _features(names: Iterable[str], where: str) -> str:
    names = list(names)
    bad = set(names) - set(FEATURES)
    if bad:
        raise FakeNvmlError(f"{where}: unknown features {sorted(bad)} (known: {', '.join(FEATURES)})")
    return ",".join(names)


def _gpu_lines(i: int, gpu: Mapping[str, Any]) -> list[str]:
    where = f"gpus[{i}]"
    _check_keys(gpu, (*GPU_NUMBERS, *GPU_STRINGS, *GPU_LISTS), where)
    lines: list[str] = []
    for key, value in gpu.items():
        if value is None or key in GPU_LISTS:
            continue
        lines.append(f"gpu.{i}.{key} {_scalar(value, f'{where}.{key}')}")
    for key in ("unsupported", "noperm"):
        if gpu.get(key):
            lines.append(f"gpu.{i}.{key} {_features(gpu[key], f'{where}.{key}')}")
    for feature, code in (gpu.get("fail") or {}).items():
        _features([feature], f"{where}.fail")
        lines.append(f"gpu.{i}.fail.{feature} {int(code)}")
    for j, proc in enumerate(gpu.get("processes") or ()):
        _check_keys(proc, PROC_KEYS, f"{where}.processes[{j}]")
        if "pid" not in proc:
            raise FakeNvmlError(f"{where}.processes[{j}]: 'pid' is required")
        for key, value in proc.items():
            if key == "mem" and value is None:
                lines.append(f"gpu.{i}.proc.{j}.mem na")  # NVML_VALUE_NOT_AVAILABLE: pynvml gives None
            elif value is not None:
                lines.append(f"gpu.{i}.proc.{j}.{key} {_scalar(value, f'{where}.processes[{j}].{key}')}")
    for j, mig in enumerate(gpu.get("mig_instances") or ()):
        _check_keys(mig, MIG_KEYS, f"{where}.mig_instances[{j}]")
        for key, value in mig.items():
            if value is not None:
                lines.append(f"gpu.{i}.mig.{j}.{key} {_scalar(value, f'{where}.mig_instances[{j}].{key}')}")
    return lines


def render_state(state: Mapping[str, Any], fill_defaults: bool = True) -> str:
    """The state file text. With ``fill_defaults`` each GPU dict is laid over :func:`default_gpu`.

    ``xids`` is a list of ``(gpu_index, xid)`` pairs; each is delivered once, in list order, so appending
    to the list and rewriting the file queues only the new ones.
    """
    _check_keys(state, SYSTEM_KEYS, "state")
    lines = ["# gpufleet fake NVML state (tests/fakenvml/fakelib.py)"]
    for key in ("driver", "nvml", "cuda", "init_error"):
        if state.get(key) is not None:
            lines.append(f"{key} {_scalar(state[key], key)}")
    gpus = list(state.get("gpus") or ())
    lines.append(f"gpu.count {int(state.get('gpu_count', len(gpus)))}")
    for i, gpu in enumerate(gpus):
        lines += _gpu_lines(i, {**default_gpu(i), **gpu} if fill_defaults else gpu)
    for seq, pair in enumerate(state.get("xids") or (), start=1):
        gpu_index, xid = pair
        lines.append(f"xid.{seq} {int(gpu_index)} {int(xid)}")
    return "\n".join(lines) + "\n"


def write_state(path: Path, state: Mapping[str, Any], fill_defaults: bool = True) -> Path:
    """Write the state file atomically (a reader never sees half a file; the inode change is noticed)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(render_state(state, fill_defaults))
    os.replace(tmp, path)
    return path
