"""How many hosts does one collector hold? Real SSH on loopback, simulated agents at 1 Hz.

The simulated fleet runs in a separate process (``python -m gpufleet.collector.simfleet``), so only the
collector's own work is measured here: SSH decryption, framing, validation, the live view. For each fleet
size it waits until every host is up, then measures for ``--seconds``:

- lag: frame received (wall clock) minus the frame's own ts, p50 / p99 / max;
- CPU: this process's user+sys seconds per host per second (and in % of one core);
- RSS of this process.

Run by hand (not part of the test suite):

    .venv/bin/python -m tests.bench.fleet_sim --hosts 50,200,500,1000 --seconds 20 --mode inproc

``--black-holes K`` adds K hosts that drop SYNs (a listener with a full accept queue; Linux drops SYNs
to it), dialled first, with a 10 s connect timeout: "conn s" is still the time until every reachable host
is up, so it shows whether reachable hosts queue behind dead ones.

``--mode subprocess`` runs the real agent (fake backend) once per host: realistic frames, but one Python
process per host, so keep N small there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.model import sample
from gpufleet.collector.settings import HostConfig
from gpufleet.collector.transport.manager import FleetTransport

LAG_BOUND = 2.0


class LagSink:
    def __init__(self) -> None:
        self.lags: list[float] = []
        self.frames = 0
        self.recording = False
        self.down = 0

    def host_state(self, state: HostState) -> None:
        if state.status == "down" and self.recording and not state.name.startswith("hole-"):
            self.down += 1

    def frame(self, host: str, frame: sample.Frame, received: float) -> None:
        self.frames += 1
        if self.recording and isinstance(frame, sample.Snapshot):
            self.lags.append(received - frame.ts)


@dataclass
class Step:
    hosts: int
    connect_s: float
    up: int
    frames_per_s: float
    lag_p50: float
    lag_p99: float
    lag_max: float
    cpu_per_host_ms: float  # CPU milliseconds per host per second
    cpu_pct: float  # of one core
    rss_mb: float
    server_cpu_pct: float
    down_events: int

    @property
    def ok(self) -> bool:
        return self.up == self.hosts and self.lag_max < LAG_BOUND and self.down_events == 0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@contextlib.contextmanager
def _dropping_listener() -> Iterator[int]:
    """A loopback port whose accept queue is full: connects to it hang like to a powered-off host."""
    lst, filler = socket.socket(), socket.socket()
    try:
        lst.bind(("127.0.0.1", 0))
        lst.listen(0)
        filler.connect(lst.getsockname())
        yield lst.getsockname()[1]
    finally:
        filler.close()
        lst.close()


async def run_step(configs: list[HostConfig], seconds: float, server_pid: int,
                   holes: Sequence[HostConfig] = ()) -> Step:
    sink = LagSink()
    view = LiveView([sink])
    transport = FleetTransport([*holes, *configs], view, max_concurrent_connects=32)
    good = {c.name for c in configs}
    t0 = time.monotonic()
    await transport.start()
    deadline = t0 + 60 + len(configs) * 0.2
    while time.monotonic() < deadline:
        if sum(1 for s in transport.states().values() if s.status == "up") == len(configs):
            break
        await asyncio.sleep(0.1)
    connect_s = time.monotonic() - t0
    await asyncio.sleep(2.0)  # let the handshake backlog drain before measuring
    sink.recording = True
    frames0, cpu0, srv0, w0 = sink.frames, _cpu(), _proc_cpu(server_pid), time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - w0
    cpu, srv, frames = _cpu() - cpu0, _proc_cpu(server_pid) - srv0, sink.frames - frames0
    sink.recording = False
    up = sum(1 for s in transport.states().values() if s.status == "up" and s.name in good)
    rss = _rss_mb()
    await transport.stop(timeout=10)
    n = len(configs)
    return Step(hosts=n, connect_s=connect_s, up=up, frames_per_s=frames / wall,
                lag_p50=_pct(sink.lags, 0.5), lag_p99=_pct(sink.lags, 0.99),
                lag_max=max(sink.lags) if sink.lags else float("nan"),
                cpu_per_host_ms=1000 * cpu / n / wall, cpu_pct=100 * cpu / wall, rss_mb=rss,
                server_cpu_pct=100 * srv / wall, down_events=sink.down)


async def main_async(args: argparse.Namespace) -> list[Step]:
    sizes = [int(x) for x in args.hosts.split(",")]
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        cmd = [sys.executable, "-m", "gpufleet.collector.simfleet", "--hosts", str(max(sizes)), "--mode",
               args.mode, "--interval", str(args.interval), "--dir", tmp, "--gpus", str(args.gpus),
               "--procs", str(args.procs)]
        if args.mode == "inproc":
            cmd.append("--shared")
        server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert server.stdout is not None
            desc = json.loads(server.stdout.readline())
            configs = [HostConfig.from_dict(h) for h in desc["hosts"]]
            steps = []
            with _dropping_listener() as port:
                holes = [dataclasses.replace(configs[0], name=f"hole-{i:03d}", port=port,
                                             connect_timeout=10.0)
                         for i in range(args.black_holes)]
                for n in sizes:
                    step = await run_step(configs[:n], args.seconds, server.pid, holes)
                    steps.append(step)
                    print(_row(step), flush=True)
                    if args.stop_on_fail and not step.ok:
                        break
            return steps
        finally:
            if server.stdin is not None:
                server.stdin.close()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()


HEADER = (f"{'hosts':>6} {'up':>5} {'conn s':>7} {'frames/s':>9} {'lag p50':>8} {'p99':>7} {'max':>7} "
          f"{'CPU ms/host/s':>13} {'CPU %':>6} {'RSS MB':>7} {'server %':>8} {'downs':>5}  ok")


def _row(s: Step) -> str:
    return (f"{s.hosts:>6} {s.up:>5} {s.connect_s:>7.1f} {s.frames_per_s:>9.0f} {s.lag_p50:>8.3f} "
            f"{s.lag_p99:>7.3f} {s.lag_max:>7.3f} {s.cpu_per_host_ms:>13.3f} {s.cpu_pct:>6.1f} "
            f"{s.rss_mb:>7.0f} {s.server_cpu_pct:>8.1f} {s.down_events:>5}  {'yes' if s.ok else 'NO'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="50,200,500,1000", help="comma-separated fleet sizes to ramp through")
    p.add_argument("--seconds", type=float, default=20.0, help="measuring window per size")
    p.add_argument("--mode", choices=["inproc", "subprocess"], default="inproc")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per simulated host (inproc)")
    p.add_argument("--procs", type=int, default=8, help="processes per GPU (inproc): realistic frames")
    p.add_argument("--stop-on-fail", action="store_true")
    p.add_argument("--black-holes", type=int, default=0, help="extra hosts that drop SYNs, dialled first")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"cores: {os.cpu_count()}  mode: {args.mode}  interval: {args.interval} s  gpus/host: {args.gpus}")
    print(HEADER, flush=True)
    steps = asyncio.run(main_async(args))
    held = [s.hosts for s in steps if s.ok]
    print(f"largest N held with max lag < {LAG_BOUND:g} s: {max(held) if held else 0}")
    if held:
        best = next(s for s in steps if s.hosts == max(held))
        print(f"at N={best.hosts}: {best.cpu_per_host_ms:.3f} CPU ms per host per second, "
              f"{best.rss_mb:.0f} MB RSS ({best.rss_mb / best.hosts * 1024:.0f} KB per host)")
    failed = [s.hosts for s in steps if not s.ok]
    if failed:
        print(f"MISSED: not held at {', '.join(map(str, failed))} hosts (transport and live view only; "
              "the whole daemon is tests/bench/daemon_bench.py)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
