"""A stand-in ``nvidia-smi`` that reads the fake library's state file, so tests/gpu_check.sh can run end to
end without a GPU: the calls the check makes, in real nvidia-smi's output formats (``--format=csv,noheader,
nounits``; ``-q -d TEMPERATURE``). ``FAKE_SMI_OVERRIDE`` (``column=value,...``) makes it disagree on purpose;
an unknown column fails as the real one does ("is not a valid field to query", exit 2)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

MIB = 1 << 20


def load(path: str) -> dict[int, dict[str, str]]:
    gpus: dict[int, dict[str, str]] = {}
    count = None
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(" ")
            if key == "gpu.count":
                count = int(value)
            elif key.startswith("gpu."):
                _, index, rest = key.split(".", 2)
                gpus.setdefault(int(index), {})[rest] = value.strip()
    return {i: g for i, g in gpus.items() if count is None or i < count}


def _w(mw: str | None) -> str:
    return "[N/A]" if mw is None else f"{int(mw) / 1000:.2f}"


def _mib(b: str | None) -> str:
    return "[N/A]" if b is None else str(int(b) // MIB)


COLUMNS: dict[str, Callable[[int, dict[str, str]], str]] = {
    "index": lambda i, g: str(i),
    "uuid": lambda i, g: g.get("uuid", "[N/A]"),
    "name": lambda i, g: g.get("name", "[N/A]"),
    "pci.bus_id": lambda i, g: g.get("pci_bus_id", "[N/A]"),
    "serial": lambda i, g: g.get("serial", "[N/A]"),
    "memory.total": lambda i, g: _mib(g.get("mem_total")),
    "memory.used": lambda i, g: _mib(g.get("mem_used")),
    "utilization.gpu": lambda i, g: g.get("util", "[N/A]"),
    "utilization.memory": lambda i, g: g.get("util_mem", "[N/A]"),
    "temperature.gpu": lambda i, g: g.get("temp", "[N/A]"),
    "power.draw": lambda i, g: _w(g.get("power_mw")),
    "enforced.power.limit": lambda i, g: _w(g.get("power_limit_mw")),
    "clocks.sm": lambda i, g: g.get("clock_sm", "[N/A]"),
    "clocks.mem": lambda i, g: g.get("clock_mem", "[N/A]"),
    "ecc.errors.uncorrected.volatile.total": lambda i, g: g.get("ecc_uncorrected", "[N/A]"),
    "mig.mode.current": lambda i, g: "Enabled" if g.get("mig", "0") != "0" else "Disabled",
    "clocks_event_reasons.active": lambda i, g: f"0x{int(g.get('throttle', '0'), 0):016x}",
}


def main(argv: list[str]) -> int:
    gpus = load(os.environ["GPUFLEET_FAKE_NVML_STATE"])
    wanted = os.environ.get("FAKE_SMI_OVERRIDE", "").split(",")
    overrides = dict(kv.split("=", 1) for kv in wanted if "=" in kv)
    if argv[:1] == ["-L"]:
        for i, g in sorted(gpus.items()):
            print(f"GPU {i}: {g.get('name')} (UUID: {g.get('uuid')})")
        return 0
    if argv[:3] == ["-q", "-d", "TEMPERATURE"]:
        for _i, g in sorted(gpus.items()):
            print(f"GPU {g.get('pci_bus_id')}\n    Temperature")
            print(f"        GPU Current Temp                  : {g.get('temp', 'N/A')} C")
            print(f"        GPU Shutdown Temp                 : {g.get('temp_shutdown', 'N/A')} C")
            print(f"        GPU Slowdown Temp                 : {g.get('temp_slowdown', 'N/A')} C")
        return 0
    query = next((a for a in argv if a.startswith("--query-")), "")
    if query.startswith("--query-compute-apps="):
        for _i, g in sorted(gpus.items()):
            for j in range(256):
                pid = g.get(f"proc.{j}.pid")
                if pid is None:
                    break
                if g.get(f"proc.{j}.type", "compute") in ("compute", "both"):
                    print(f"{pid}, {_mib(g.get(f'proc.{j}.mem'))}, {g.get('uuid')}")
        return 0
    if query.startswith("--query-gpu="):
        columns = query.split("=", 1)[1].split(",")
        for c in columns:
            if c not in COLUMNS:
                print(f'Field "{c}" is not a valid field to query.', file=sys.stderr)
                return 2
        for i, g in sorted(gpus.items()):
            print(", ".join(overrides.get(c, COLUMNS[c](i, g)) if c != "index" else str(i) for c in columns))
        return 0
    print(f"fake nvidia-smi: unsupported arguments {argv}", file=sys.stderr)
    return 9


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
