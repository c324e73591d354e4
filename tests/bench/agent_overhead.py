"""Agent overhead on a busy host: CPU per minute, peak RSS and bytes per snapshot (run by hand).

The real agent runs its real NVML code path against the fake libnvidia-ml.so.1 (tests/fakenvml), on 8 GPUs
holding 64 processes. The processes are real ``sleep`` processes, so /proc attribution (user, command,
start time, cgroup) does the work it does on a real host. Target: under 1 % of one core and under 40 MB.
The fake's Xid wait blocks in the kernel (inotify on the state file) as the driver's does, so the agent's
event thread costs here what it costs on a GPU host: next to nothing.

Beside it, over the same window and interval, runs a minimal pynvml + /proc loop (:data:`MINIMAL_LOOP`:
the same NVML readings and /proc files, one ``json.dumps`` per sample, no tiers, no events, no validation):
the floor of what any agent does. Target (issue 13): the agent's CPU per sample within 10 % of the loop's.
Exits 1 when a target is missed.

The bench talks to the agent as the collector does: it accepts 1.3 deltas on the agent's stdin
(agent/delta.py), so the agent sends a keyframe and then what changed; ``--full`` leaves them unaccepted (a
collector before 1.3: full snapshots every interval). A sample is a snapshot or a delta.

    .venv/bin/python -m tests.bench.agent_overhead [--seconds 60] [--gpus 8] [--procs 64] [--interval 1]
        [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpufleet.agent import delta

from tests.fakenvml import fakelib

CPU_TARGET_PCT = 1.0
RATIO_TARGET = 1.10  # agent CPU per sample / the minimal loop's

#: The floor: what a minimal agent does per sample (run as its own process, like the agent, on the fake lib).
MINIMAL_LOOP = r"""
import json, os, sys, time
import pynvml as n
n.nvmlInit()
hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
uuids = [n.nvmlDeviceGetUUID(h) for h in hs]
interval = float(sys.argv[1])
static = {}  # (pid, start) -> what does not change: read once, as the agent does
def proc(pid):
    out = {"pid": pid}
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        rest = stat[stat.rindex(")") + 2:].split()
        key = (pid, rest[19])
        if key not in static:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/cgroup") as f:
                cgroup = f.read()
            static[key] = {"uid": int(status.split("Uid:", 1)[1].split()[0]), "cgroup": cgroup[:60],
                           "command": cmd.replace(b"\0", b" ").decode(errors="replace").strip()}
    except OSError:
        return out
    out.update(static[key], state=rest[0], ppid=int(rest[1]), start=int(rest[19]))
    return out
def opt(fn, *a):
    try:
        return fn(*a)
    except n.NVMLError:
        return None
ts = 0
while True:
    t0 = time.monotonic()
    gpus = []
    for h, u in zip(hs, uuids):
        util = n.nvmlDeviceGetUtilizationRates(h)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        procs = [proc(p.pid) | {"mem": p.usedGpuMemory} for p in n.nvmlDeviceGetComputeRunningProcesses(h)]
        sm = {s.pid: s.smUtil for s in (opt(n.nvmlDeviceGetProcessUtilization, h, ts) or [])}
        for p in procs:
            p["sm"] = sm.get(p["pid"])
        gpus.append({"uuid": u, "util": util.gpu, "util_mem": util.memory, "used": mem.used,
                     "total": mem.total, "temp": n.nvmlDeviceGetTemperature(h, 0),
                     "power": n.nvmlDeviceGetPowerUsage(h), "sm": n.nvmlDeviceGetClockInfo(h, 1),
                     "memclk": n.nvmlDeviceGetClockInfo(h, 2),
                     "throttle": opt(n.nvmlDeviceGetCurrentClocksThrottleReasons, h),
                     "fan": opt(n.nvmlDeviceGetFanSpeed, h), "procs": procs})
    ts = int(time.time() * 1e6)
    sys.stdout.write(json.dumps({"type": "snapshot", "ts": time.time(), "gpus": gpus}) + "\n")
    sys.stdout.flush()
    time.sleep(max(0.0, interval - (time.monotonic() - t0)))
"""
RSS_TARGET_MB = 40.0
GIB = 1 << 30
SAMPLES = ("snapshot", "delta")  # the frames that carry a sample


@dataclass
class Frames:
    """What the agent wrote, per frame type (filled by the reader thread)."""

    sizes: dict[str, list[int]] = field(default_factory=dict)
    last_snapshot: dict[str, Any] | None = None
    first_snapshot_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                obj = json.loads(line)
            except ValueError:
                kind = "invalid"
                obj = None
            else:
                kind = str(obj.get("type", "unknown")) if isinstance(obj, dict) else "invalid"
            with self.lock:
                self.sizes.setdefault(kind, []).append(len(line))
                if kind == "snapshot":
                    self.last_snapshot = obj
                if kind in SAMPLES and self.first_snapshot_at is None:
                    self.first_snapshot_at = time.monotonic()

    def samples(self) -> int:
        """Snapshots and deltas so far (the caller holds the lock)."""
        return sum(len(self.sizes.get(kind, [])) for kind in SAMPLES)


def agent_command(interval: float) -> list[str]:
    exe = Path(sys.executable).with_name("gpufleet-agent")
    cmd = [str(exe)] if exe.exists() else [shutil.which("gpufleet-agent") or "gpufleet-agent"]
    return [*cmd, "--interval", str(interval)]


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` so far: the scheduler's nanoseconds (/proc/PID/schedstat) where the kernel keeps
    them, else utime + stime in clock ticks (fields 14 and 15 of /proc/PID/stat: 10 ms steps, about 5 % of
    a minute of this agent's CPU)."""
    try:
        return sum(thread_seconds(pid).values())
    except OSError:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_seconds(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid`` ("tid name" -> seconds), from /proc/PID/task/TID/schedstat."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            out[f"{tid} {name}"] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
    return out


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def fleet_state(gpus: int, pids: list[int]) -> dict[str, Any]:
    state = fakelib.default_state(gpus)
    for i, gpu in enumerate(state["gpus"]):
        mine = pids[i::gpus]
        gpu.update(
            util=40 + i * 7 % 60,
            util_mem=20 + i,
            mem_used=len(mine) * 4 * GIB,
            temp=60 + i,
            power_mw=250_000 + i,
            clock_graphics=1410,
            clock_sm=1410,
            throttle=0x4,
            processes=[{"pid": pid, "mem": 4 * GIB, "sm": 5 + j, "memutil": 2} for j, pid in enumerate(mine)],
        )
    return state


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window (after warm-up)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the first snapshot not measured")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--full", action="store_true", help="do not accept deltas (a collector before 1.3)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    sleepers: list[subprocess.Popen[bytes]] = []
    agent: subprocess.Popen[bytes] | None = None
    floor: subprocess.Popen[bytes] | None = None
    try:
        lib_dir = fakelib.build(work)
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.procs)]
        state_path = fakelib.write_state(work / "state", fleet_state(args.gpus, [p.pid for p in sleepers]))
        frames = Frames()
        started = time.monotonic()
        agent = subprocess.Popen(
            agent_command(args.interval),
            env=fakelib.env_for(lib_dir, state_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert agent.stdout is not None and agent.stdin is not None
        reader = threading.Thread(target=frames.read, args=(agent.stdout,), daemon=True)
        reader.start()
        if not args.full:  # as the collector does on the agent's hello
            agent.stdin.write(delta.ACCEPT)
            agent.stdin.flush()
        floor_frames = Frames()
        floor = subprocess.Popen([sys.executable, "-c", MINIMAL_LOOP, str(args.interval)],
                                 env=fakelib.env_for(lib_dir, state_path), stdout=subprocess.PIPE)
        assert floor.stdout is not None
        threading.Thread(target=floor_frames.read, args=(floor.stdout,), daemon=True).start()
        while frames.first_snapshot_at is None or floor_frames.first_snapshot_at is None:
            for name, proc in (("agent", agent), ("minimal loop", floor)):
                if proc.poll() is not None or time.monotonic() - started > 60:
                    print(f"{name} produced no snapshot (exit {proc.poll()})", file=sys.stderr)
                    return 1
            time.sleep(0.05)
        startup_s = frames.first_snapshot_at - started
        startup_cpu = cpu_seconds(agent.pid)
        time.sleep(args.warmup)
        threads0 = thread_seconds(agent.pid)
        cpu0, t0, fcpu0 = cpu_seconds(agent.pid), time.monotonic(), cpu_seconds(floor.pid)
        with frames.lock, floor_frames.lock:
            n0, f0 = frames.samples(), len(floor_frames.sizes.get("snapshot", []))
        time.sleep(args.seconds)
        cpu1, t1, fcpu1 = cpu_seconds(agent.pid), time.monotonic(), cpu_seconds(floor.pid)
        threads1 = thread_seconds(agent.pid)
        with floor_frames.lock:
            floor_measured = len(floor_frames.sizes.get("snapshot", [])) - f0
        hwm_kb, rss_kb = status_kb(agent.pid, "VmHWM"), status_kb(agent.pid, "VmRSS")
        with frames.lock:
            measured = frames.samples() - n0
            last = frames.last_snapshot or {}
            sizes = {kind: list(v) for kind, v in frames.sizes.items()}
    finally:
        if agent is not None:
            if agent.stdin:
                agent.stdin.close()  # EOF on stdin: the agent exits
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
        if floor is not None:
            floor.kill()
            floor.wait()
        for p in sleepers:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)

    cpu_per_min = (cpu1 - cpu0) / (t1 - t0) * 60
    per_sample = (cpu1 - cpu0) / max(1, measured) * 1000
    floor_per_sample = (fcpu1 - fcpu0) / max(1, floor_measured) * 1000
    ratio = per_sample / floor_per_sample if floor_per_sample > 0 else float("inf")
    pct = cpu_per_min / 60 * 100
    procs = [p for g in last.get("gpus", []) for p in g.get("processes", [])]
    attributed = sum(1 for p in procs if p.get("attributed", True) and p.get("command"))
    rows = [
        (
            "GPUs / processes",
            f"{len(last.get('gpus', []))} / {len(procs)} ({attributed} attributed from /proc)",
        ),
        ("interval", f"{args.interval:g} s, measured {t1 - t0:.1f} s, {measured} samples ("
                     + ("full snapshots: deltas not accepted" if args.full else "1.3: keyframe and deltas")
                     + ")"),
        ("start-up", f"{startup_s:.2f} s to first snapshot, {startup_cpu:.2f} CPU s"),
        ("CPU per minute", f"{cpu_per_min:.2f} s"),
        ("share of one core", f"{pct:.2f} %  (target < {CPU_TARGET_PCT:g} %)"),
        ("CPU per sample", f"{per_sample:.2f} ms; minimal pynvml + /proc loop beside it "
                           f"{floor_per_sample:.2f} ms ({floor_measured} samples) = {ratio:.2f}x  "
                           f"(target <= {RATIO_TARGET:.2f}x)"),
        ("CPU per sample by thread", ", ".join(
            f"{(threads1[t] - threads0.get(t, 0.0)) / max(1, measured) * 1000:.2f} ms"
            for t in sorted(threads1, key=lambda t: threads0.get(t, 0.0) - threads1[t]))
         + " (the sampling loop first; then the Xid watcher, heartbeat, stdin threads)"),
        (
            "peak RSS (VmHWM)",
            f"{hwm_kb / 1024:.1f} MB, now {rss_kb / 1024:.1f} MB  (target < {RSS_TARGET_MB:g} MB)",
        ),
        *((f"bytes per {kind}", f"{len(v)} of them, mean {sum(v) / len(v):.0f}, max {max(v)}")
          for kind, v in sizes.items() if kind in SAMPLES),
        (
            "other frames",
            ", ".join(f"{k}: {len(v)} x ~{sum(v) // len(v)} B" for k, v in sizes.items() if k not in SAMPLES)
            or "none",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"gpufleet-agent overhead, fake NVML, {args.gpus} GPUs, {args.procs} processes")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    ok = pct < CPU_TARGET_PCT and hwm_kb / 1024 < RSS_TARGET_MB and ratio <= RATIO_TARGET
    print("  result" + " " * (width - 4) + ("within targets" if ok else "OVER TARGET"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
