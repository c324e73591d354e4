"""What the gateway returns: plain readings, free of pynvml types, so the sampler never sees ctypes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SystemInfo:
    driver_version: str | None
    nvml_version: str | None
    cuda_version: int | None


@dataclass(slots=True)
class MemoryReading:
    total: int | None
    used: int | None
    reserved: int | None  # None from the v1 call (which counts reserved memory as used)


@dataclass(slots=True)
class RawProcess:
    pid: int
    kind: str  # "compute" | "graphics" | "compute+graphics" | "mps" (an MPS client)
    used_memory: int | None  # bytes; None where the driver cannot tell (WDDM)
    gi_id: int | None = None  # MIG GPU instance, None outside MIG
    ci_id: int | None = None  # MIG compute instance


@dataclass(slots=True)
class ProcessList:
    """The processes of one GPU, or why they could not be read.

    ``error`` set means the list is *unknown* (the agent could not read it): an empty ``processes`` then
    says nothing about the GPU, and no rule may read it as "no process" (issue 32, item 6).
    """

    processes: list[RawProcess] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class ProcessUtil:
    """Per-pid utilization since the last call; ``last_ts`` is what to pass next time.

    An empty ``by_pid`` is a real answer: NVML keeps samples only of processes that ran kernels, and answers
    NOT_FOUND when none did (NVML API reference, nvmlDeviceGetProcessUtilization), so every listed process
    used 0 % (as nvitop reads it). ``None`` from the gateway means the call is not supported (MIG, old GPUs).
    """

    by_pid: dict[int, tuple[int, int]]  # pid -> (sm %, mem %), clamped 0..100, max over the window
    last_ts: int


@dataclass(slots=True)
class GpmState:
    """One GPU's (or one MIG instance's) two GPM sample buffers: GPM metrics are the difference between two
    samples, so each reading compares this interval's sample with the previous one (the first has none)."""

    prev: Any
    cur: Any
    primed: bool = False  # ``prev`` holds a sample
    gi_id: int | None = None  # set for a MIG instance: sampled with nvmlGpmMigSampleGet


@dataclass(slots=True)
class GpmReading:
    """GPM activity over the last interval, percent (Hopper and later)."""

    sm_active: int | None = None  # share of SMs busy
    tensor_active: int | None = None  # time any tensor pipe was busy (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    dram_active: int | None = None  # DRAM bandwidth used (DCGM_FI_PROF_DRAM_ACTIVE)
    gr_active: int | None = None  # time any graphics/compute engine was busy (DCGM_FI_PROF_GR_ENGINE_ACTIVE)


@dataclass(slots=True)
class RemappedRows:
    """Row remapping (A100 and later), NVIDIA "GPU Memory Error Management": a pending remap is applied at
    the next GPU reset; a failure means the GPU should go back to the vendor."""

    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(slots=True)
class XidReading:
    handle: Any
    event_type: int
    data: int  # the Xid for XidCriticalError events


@dataclass(slots=True)
class ReadLog:
    """What the reads of one GPU in one sample did: successes, and the fields that failed and how. The sampler
    turns it into ``read_errors`` on the wire and into "every reading failed" for the lost-GPU test."""

    ok: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # field -> NVML error name
