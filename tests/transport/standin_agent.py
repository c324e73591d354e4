"""A stand-in agent for transport tests: valid wire frames at --interval, exits on stdin EOF.

Used only while (or where) the real agent is not runnable; it imports nothing but the wire module.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys
import time

from gpufleet.agent import wire


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--fake", default="busy")
    p.add_argument("--once", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = sys.stdout.buffer
    gpus = [wire.GpuInfo(index=0, uuid="GPU-standin-0", name="Standin")]
    out.write(wire.encode(wire.Hello(agent_version="standin", hostname=socket.gethostname(), ts=time.time(),
                                     driver_version="0.0", backend="fake", gpus=gpus)))
    out.flush()
    seq = 0
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], args.interval)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            return
        seq += 1
        sample = wire.GpuSample(index=0, uuid="GPU-standin-0", util_gpu=50, memory_used=1 << 30)
        out.write(wire.encode(wire.Snapshot(ts=time.time(), seq=seq, gpus=[sample])))
        out.flush()
        if args.once:
            return


if __name__ == "__main__":
    main()
