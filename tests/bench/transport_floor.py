"""The floor under the collector's CPU per host-sample that no rule or store work can lower (run by hand).

    .venv/bin/python -m tests.bench.transport_floor [--hosts 300] [--seconds 20] [--proto 1.3]

The same simulated fleet as tests/bench/daemon_bench.py (its SSH servers in their own process, the realistic
8 GPU x 8 process frames), read by the least a collector over SSH can do, in this process: one asyncio loop,
one asyncssh connection and session per host with the collector's own ciphers, the 1.3 accept written on
stdin, and per line received either nothing (split into lines only: SSH, decryption, the event loop) or
``msgspec.json.decode`` too. CPU is this process's (utime + stime) over the lines received. Beside it, the
issue's whole-daemon target (0.25 ms) and daemon_bench's figure must be compared with these: the daemon
cannot cost less than this floor plus its own work per sample.

Exits 1 when the floor alone leaves under half the target for everything else (decode, facts, 20 rules,
job tracking, the store): then the target needs another transport, not cheaper rules.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh
import msgspec
import yaml
from gpufleet.agent.delta import ACCEPT
from gpufleet.collector.transport.ssh import ENCRYPTION_ALGS

TARGET_MS = 0.25  # issue 33: the whole daemon's CPU per host-sample
TICK = os.sysconf("SC_CLK_TCK")


class _Count(asyncssh.SSHClientSession[bytes]):
    """Splits the channel's bytes into lines, and decodes each when asked: nothing else."""

    decode = False
    lines = 0

    def __init__(self) -> None:
        self.buf = b""

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        buf = self.buf + data if self.buf else data
        *whole, self.buf = buf.split(b"\n")
        _Count.lines += len(whole)
        if _Count.decode:
            for line in whole:
                msgspec.json.decode(line)


async def _measure(cfg: dict[str, Any], seconds: float, decode: bool) -> tuple[float, int]:
    defaults = cfg["defaults"]
    conns = []
    for host in cfg["hosts"]:
        conn = await asyncssh.connect(
            host["address"], port=host["port"], username=host["user"], client_keys=[defaults["key"]],
            known_hosts=defaults["known_hosts"], config=None, agent_path=None,
            encryption_algs=ENCRYPTION_ALGS)
        chan, _ = await conn.create_session(_Count, "gpufleet-agent", encoding=None)
        chan.write(ACCEPT)
        conns.append(conn)
    await asyncio.sleep(5.0)  # every host past its keyframe
    _Count.decode = decode
    cpu0, lines0 = time.process_time(), _Count.lines
    await asyncio.sleep(seconds)
    cpu, lines = time.process_time() - cpu0, _Count.lines - lines0
    for conn in conns:
        conn.close()
    return cpu, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--proto", choices=["1.2", "1.3"], default="1.3")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.hosts} simulated hosts, 8 GPUs x 8 processes, agents speak {args.proto}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="transport-floor-") as tmp:
        for decode in (False, True):
            d = Path(tmp) / f"d{int(decode)}"
            d.mkdir()
            sim = subprocess.Popen(
                [sys.executable, "-m", "gpufleet.collector.simfleet", "--hosts", str(args.hosts), "--mode",
                 "inproc", "--gpus", "8", "--procs", "8", "--shared", "--dir", str(d / "fleet"), "--config",
                 str(d / "gpufleet.yaml"), "--proto", args.proto],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert sim.stdout is not None and sim.stdin is not None
            try:
                json.loads(sim.stdout.readline())
                cfg = yaml.safe_load((d / "gpufleet.yaml").read_text())
                cpu, lines = asyncio.run(_measure(cfg, args.seconds, decode))
            finally:
                sim.stdin.close()
                sim.wait(60)
            rows.append((("SSH + loop + lines" + (" + msgspec decode" if decode else "")),
                         1000 * cpu / max(1, lines), lines / args.seconds / args.hosts))
    for what, ms, rate in rows:
        print(f"  {what:<40} {ms:.3f} ms CPU per host-sample  ({rate:.2f} samples/host/s; "
              f"{100 * ms / TARGET_MS:.0f} % of the {TARGET_MS} ms target)")
    floor = rows[-1][1]
    left = TARGET_MS - floor
    print(f"left for facts, rules, jobs, store and live view: {left:.3f} ms per host-sample")
    return 1 if left < TARGET_MS / 2 else 0


if __name__ == "__main__":
    sys.exit(main())
