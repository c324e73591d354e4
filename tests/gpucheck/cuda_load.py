"""A GPU workload with no dependency but the driver: libcuda.so.1 through ctypes.

cuInit, a context on one GPU, 1 GiB of device memory, then a PTX kernel that spins every SM for ``--busy``
seconds (it reads %globaltimer until the time is up), then ``--idle`` seconds holding the context and the
memory but running nothing. It prints one JSON line per phase to stdout (``{"phase": "busy", "t": ...}``), so
the checker knows when to expect SM utilization above 0 and when exactly 0.

Exit 77 when libcuda.so.1 cannot be loaded (no driver here: the caller skips the workload checks).
Standard library only: it runs on a GPU machine before anything else is installed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

#: One block per SM, each thread spinning on the global timer until ``start + ns``: one wave, every SM busy
#: for the whole time (PTX ISA 3.1+ %globaltimer; JIT-compiled by the driver for whatever GPU it meets).
SPIN_PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry spin(
    .param .u64 spin_ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [spin_ns];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd3, %rd2, %rd1;
$L_spin:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p1, %rd4, %rd3;
    @%p1 bra $L_spin;
    ret;
}
"""

CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6


class CudaError(Exception):
    pass


def _check(cuda: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        raise CudaError(f"{what} failed: {rc} {(name.value or b'?').decode()}")


def phase(name: str, **extra: object) -> None:
    print(json.dumps({"phase": name, "t": time.time(), **extra}), flush=True)


def run(device: int, busy: float, idle: float) -> int:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print(f"libcuda.so.1 not loadable: {exc}", file=sys.stderr)
        return 77
    _check(cuda, cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    _check(cuda, cuda.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    sms = ctypes.c_int()
    _check(cuda, cuda.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
           "cuDeviceGetAttribute")
    ctx = ctypes.c_void_p()
    _check(cuda, cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    mem = ctypes.c_uint64()
    _check(cuda, cuda.cuMemAlloc_v2(ctypes.byref(mem), ctypes.c_size_t(1 << 30)), "cuMemAlloc (1 GiB)")
    _check(cuda, cuda.cuMemsetD8_v2(mem, 0, ctypes.c_size_t(1 << 30)), "cuMemsetD8")  # touch every page
    log = ctypes.create_string_buffer(8192)
    options = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
    values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
    module = ctypes.c_void_p()
    rc = cuda.cuModuleLoadDataEx(ctypes.byref(module), SPIN_PTX, 2, options, values)
    if rc != 0:
        raise CudaError(f"cuModuleLoadDataEx failed: {rc}: {log.value.decode(errors='replace')}")
    fn = ctypes.c_void_p()
    _check(cuda, cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"spin"), "cuModuleGetFunction")
    ns = ctypes.c_uint64(int(busy * 1e9))
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
    phase("busy", pid=os.getpid(), sms=sms.value)
    _check(cuda, cuda.cuLaunchKernel(fn, sms.value, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
    _check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    phase("idle")
    time.sleep(idle)
    phase("done")
    cuda.cuMemFree_v2(mem)
    cuda.cuCtxDestroy_v2(ctx)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--busy", type=float, default=5.0)
    p.add_argument("--idle", type=float, default=10.0)
    args = p.parse_args(argv)
    try:
        return run(args.device, args.busy, args.idle)
    except CudaError as exc:
        print(f"cuda_load: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
