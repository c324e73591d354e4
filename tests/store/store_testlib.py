"""Frame builders for the store tests (imported by test modules; conftest puts this dir on sys.path)."""

from __future__ import annotations

from typing import Any

from gpufleet.agent import wire

GIB = 1 << 30
MIB = 1 << 20


def proc(pid: int, user: str | None = "alice", mem: int | None = GIB, sm: int | None = 50,
         start: float | None = 1000.0, **kw: Any) -> wire.ProcessSample:
    return wire.ProcessSample(pid=pid, user=user, gpu_memory=mem, sm_util=sm, start_time=start,
                              command=kw.pop("command", f"python train_{pid}.py"), **kw)


def gpu(index: int, uuid: str | None = None, util: int | None = 50, mem: int | None = 2 * GIB,
        temp: int | None = 60, power: float | None = 150.0, procs: list[wire.ProcessSample] | None = None,
        **kw: Any) -> wire.GpuSample:
    return wire.GpuSample(index=index, uuid=uuid or f"GPU-{index:04d}", name="NVIDIA H100", util_gpu=util,
                          memory_used=mem, memory_total=80 * GIB, temperature=temp, power_draw=power,
                          power_limit=700.0, processes=procs or [], **kw)


def snap(ts: float, gpus: list[wire.GpuSample], seq: int = 0) -> wire.Snapshot:
    return wire.Snapshot(ts=ts, seq=seq, gpus=gpus)


def hello(gpus: list[wire.GpuInfo] | None = None, ts: float = 1000.0) -> wire.Hello:
    return wire.Hello(agent_version="0.1.0", hostname="reported-name", ts=ts, driver_version="550.54",
                      nvml_version="12.550", cuda_version=12040, backend="fake", gpus=gpus or [])
