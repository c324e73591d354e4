"""The fake backend: NVML and /proc answered from a scenario, for tests and the demo (no GPU, no driver).

- ``scenario``: the YAML model (GPUs, processes, a timeline) and its loader, with errors naming file and key.
- ``nvml``: :class:`FakeNvml`, the pynvml surface the gateway uses, answering from a scenario the way real
  drivers do (its docstring lists each behaviour and its source).
- ``procs``: :class:`FakeProcs`, the /proc attribution of the scenario's processes.

``from gpufleet.agent.fake import FakeNvml, FakeProcs, load_scenario`` is the one import a caller needs.
"""

from __future__ import annotations

from gpufleet.agent.fake.nvml import FakeEventSet, FakeHandle, FakeNvml
from gpufleet.agent.fake.procs import FakeProcs
from gpufleet.agent.fake.scenario import (
    FIELDS,
    Curve,
    FakeGpu,
    FakeMig,
    FakeProcess,
    Scenario,
    load_scenario,
    parse_scenario,
)

__all__ = [
    "FIELDS",
    "Curve",
    "FakeEventSet",
    "FakeGpu",
    "FakeHandle",
    "FakeMig",
    "FakeNvml",
    "FakeProcess",
    "FakeProcs",
    "Scenario",
    "load_scenario",
    "parse_scenario",
]
