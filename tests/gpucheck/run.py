"""The real-GPU acceptance of gpufleet-agent (tests/gpu_check.sh runs it): one PASS/FAIL/SKIP line per check,
then a summary line.

For each nvidia-ml-py wheel given (the oldest and the newest the project supports), installed into its own
folder next to a package view of this checkout, the agent is checked against the machine:

- **stream**: 15 frames from the streaming agent: a hello with driver/NVML/CUDA versions, snapshots with
  seq 1..N, GPM activity on Hopper and later, no throttle bit the agent cannot name, nothing on stderr;
- **fields**: ``--once --json`` against nvidia-smi, field by field (identity exactly, live readings within
  tolerances, since the two tools read a few hundred milliseconds apart);
- **workload** (where libcuda.so.1 loads): a process of ours (tests/gpucheck/cuda_load.py) holds 1 GiB and
  spins every SM for 5 s, then idles 10 s: its pid and memory match ``nvidia-smi --query-compute-apps``,
  its user, command and start time match /proc, its SM utilization is above 0 while it spins and exactly 0
  (not unknown) while it idles;
- **unprivileged**: ``--once`` as the user ``nobody`` (when run as root): every GPU read, no process list
  unknown.

Standard library only. Exit 0: every check passed or skipped; 1: a check failed; 77: no GPU here at all.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MIB = 1 << 20
HOPPER_AND_LATER = re.compile(r"\b(H100|H200|H800|H20|GH200|B100|B200|GB200|B300|GB300)\b")

# nvidia-smi --query-gpu column -> (agent field, conversion to nvidia-smi units, agreement, kind)
Agree = Callable[[Any, Any], bool]


def within(abs_tol: float, rel_tol: float = 0.0) -> Agree:
    return lambda a, s: abs(a - s) <= max(abs_tol, rel_tol * abs(s))


def _same(a: Any, s: Any) -> bool:
    return bool(a == s)


FIELDS: list[tuple[str, str, Callable[[Any], Any], Agree, str]] = [
    ("uuid", "uuid", str, _same, "exact"),
    ("name", "name", str, _same, "exact"),
    ("pci.bus_id", "pci_bus_id", str, lambda a, s: a.upper() == s.upper(), "exact"),
    ("serial", "serial", str, _same, "exact"),
    ("memory.total", "memory_total", lambda b: b // MIB, within(1), "exact"),
    ("memory.used", "memory_used", lambda b: b / MIB, within(512, 0.05), "live"),
    ("utilization.gpu", "util_gpu", float, within(15), "live"),
    ("utilization.memory", "util_mem", float, within(15), "live"),
    ("temperature.gpu", "temperature", float, within(3), "live"),
    ("power.draw", "power_draw", float, within(15, 0.10), "live"),
    ("enforced.power.limit", "power_limit", float, within(1), "exact"),
    ("clocks.sm", "clock_sm", float, within(50, 0.15), "live"),
    ("clocks.mem", "clock_mem", float, within(50, 0.15), "live"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected", float, within(0), "exact"),
    ("mig.mode.current", "mig_mode", lambda m: "Enabled" if m else "Disabled", _same, "exact"),
]
#: Clock event reason names that change from one read to the next on a busy GPU: compared only when both
#: tools read the same set otherwise.
FLICKER = frozenset({"gpu_idle", "sw_power_cap"})
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks", 0x200: "board_limit", 0x400: "reliability"}


@dataclass
class Report:
    """The lines printed so far, and the counts for the summary."""

    counts: dict[str, int] = field(default_factory=lambda: {"PASS": 0, "FAIL": 0, "SKIP": 0})

    def line(self, result: str, label: str, check: str, detail: str) -> None:
        self.counts[result] += 1
        print(f"{result:<4}  [{label}] {check}: {detail}", flush=True)

    def check(self, ok: bool, label: str, check: str, detail: str) -> None:
        self.line("PASS" if ok else "FAIL", label, check, detail)


# ------------------------------------------------------------------------------------------ nvidia-smi


def smi(*args: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def smi_query_gpu(column: str) -> dict[int, str] | None:
    """index -> the raw value of one --query-gpu column; None where this nvidia-smi lacks the column."""
    out = smi(f"--query-gpu=index,{column}", "--format=csv,noheader,nounits")
    if out is None:
        return None
    return {int(row[0]): row[1].strip() for row in csv.reader(io.StringIO(out)) if len(row) >= 2}


def smi_thresholds() -> dict[int, dict[str, float]]:
    """index -> {"temp_shutdown": C, "temp_slowdown": C} from ``nvidia-smi -q -d TEMPERATURE``."""
    out = smi("-q", "-d", "TEMPERATURE") or ""
    found: dict[int, dict[str, float]] = {}
    index = -1
    for line in out.splitlines():
        if line.startswith("GPU "):
            index += 1
        m = re.match(r"\s*GPU (Shutdown|Slowdown) Temp\s*:\s*([0-9.]+) C", line)
        if m and index >= 0:
            found.setdefault(index, {})[f"temp_{m.group(1).lower()}"] = float(m.group(2))
    return found


def smi_apps() -> list[tuple[int, float, str]]:
    """(pid, MiB, gpu uuid) of every compute process nvidia-smi lists."""
    out = smi("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits") or ""
    rows = []
    for row in csv.reader(io.StringIO(out)):
        if len(row) >= 3 and row[0].strip().isdigit():
            rows.append((int(row[0]), number(row[1]) or 0.0, row[2].strip()))
    return rows


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "[Unknown Error]"


# ------------------------------------------------------------------------------------------ the agent


@dataclass
class Env:
    """One nvidia-ml-py release, installed beside a package view of this checkout."""

    label: str
    pythonpath: str
    prefix: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [*self.prefix, "env", f"PYTHONPATH={self.pythonpath}", sys.executable, "-m", "gpufleet.agent",
                *args]


def decode_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def once(env: Env) -> tuple[dict[str, Any] | None, str]:
    result = subprocess.run(env.argv("--once", "--json"), capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        return None, result.stderr.strip()
    frames = decode_lines(result.stdout)
    return (frames[0] if frames else None), result.stderr.strip()


@contextmanager
def streaming(env: Env, *args: str) -> Iterator[tuple[list[dict[str, Any]], list[str]]]:
    """The agent streaming; yields (frames so far, stderr lines so far), both filled by reader threads."""
    proc = subprocess.Popen(env.argv(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    frames: list[dict[str, Any]] = []
    errors: list[str] = []

    def pump(stream: Any, sink: list[Any], parse: Callable[[str], Any]) -> None:
        for line in stream:
            if line.strip():
                sink.append(parse(line))

    threads = [threading.Thread(target=pump, args=(proc.stdout, frames, json.loads), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, errors, str.rstrip), daemon=True)]
    for t in threads:
        t.start()
    try:
        yield frames, errors
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for t in threads:
            t.join(5)


def snapshots(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("type") == "snapshot"]


# ------------------------------------------------------------------------------------------ the checks


def check_stream(rep: Report, env: Env, count: int = 15) -> None:
    with streaming(env, "--interval", "0.5", "--max-frames", str(count)) as (frames, errors):
        deadline = time.monotonic() + 60
        while len(snapshots(frames)) < count and time.monotonic() < deadline:
            time.sleep(0.1)
    hello = next((f for f in frames if f.get("type") == "hello"), None)
    keys = ("driver_version", "nvml_version", "cuda_version")
    versions = None if hello is None else [hello.get(k) for k in keys]
    rep.check(hello is not None and None not in (versions or [None]) and bool(hello.get("agent_version")),
              env.label, "stream hello", f"driver/NVML/CUDA {versions}")
    snaps = snapshots(frames)
    seqs = [s["seq"] for s in snaps]
    rep.check(seqs == list(range(1, count + 1)), env.label, "stream seq",
              f"{len(snaps)} snapshots, seq {seqs}")
    unknown = sorted({r for s in snaps for g in s.get("gpus", []) for r in g.get("throttle_reasons") or []
                      if r.startswith("unknown_")})
    rep.check(not unknown, env.label, "stream throttle bits", f"unnamed bits: {unknown or 'none'}")
    rep.check(not errors, env.label, "stream stderr",
              f"{len(errors)} lines" + (f": {errors[:3]}" if errors else ""))
    hopper = {g["index"] for g in (hello or {}).get("gpus", [])
              if HOPPER_AND_LATER.search(g.get("name") or "")}
    if not hopper:
        rep.line("SKIP", env.label, "stream GPM", "no Hopper or later GPU here")
    else:
        later = snaps[1:]
        missing = sorted({g["index"] for s in later for g in s["gpus"]
                          if g["index"] in hopper and not g.get("mig_mode") and g.get("sm_active") is None})
        rep.check(bool(later) and not missing, env.label, "stream GPM",
                  f"sm_active on GPUs {sorted(hopper)}" + (f", missing on {missing}" if missing else ""))


def check_fields(rep: Report, env: Env) -> None:
    snap, err = once(env)
    if snap is None:
        rep.line("FAIL", env.label, "fields", f"gpufleet-agent --once --json failed: {err}")
        return
    gpus = {g["index"]: g for g in snap.get("gpus", [])}
    smi_gpus = smi_query_gpu("uuid") or {}
    rep.check(set(gpus) == set(smi_gpus), env.label, "fields GPUs",
              f"agent {sorted(gpus)}, nvidia-smi {sorted(smi_gpus)}")
    broken = {i: g.get("error") for i, g in gpus.items() if g.get("error")}
    rep.check(not broken, env.label, "fields GPU errors", f"{broken or 'none'}")
    for column, key, convert, agree, kind in FIELDS:
        values = smi_query_gpu(column)
        if values is None:
            rep.line("SKIP", env.label, f"field {column}", "this nvidia-smi does not know the column")
            continue
        bad = []
        for index, raw in sorted(values.items()):
            a = gpus.get(index, {}).get(key)
            s = None if raw.startswith("[") else raw if convert is str or key == "mig_mode" else number(raw)
            if s is None and a is None:
                continue  # both say "not available"
            if s is None or a is None:
                bad.append(f"GPU {index}: agent {a!r}, nvidia-smi {raw!r}")
                continue
            mine = convert(a)
            ok = agree(mine, s)
            if key == "memory_used" and not ok and gpus[index].get("memory_reserved") is not None:
                # a driver that counts reserved memory as used
                ok = agree(convert(a + gpus[index]["memory_reserved"]), s)
            if not ok:
                bad.append(f"GPU {index}: agent {mine!r}, nvidia-smi {raw!r}")
        rep.check(not bad, env.label, f"field {column} ({kind})", "; ".join(bad) or "agree")
    check_thresholds(rep, env, gpus)
    check_reasons(rep, env, gpus)


def check_thresholds(rep: Report, env: Env, gpus: dict[int, dict[str, Any]]) -> None:
    smi_t = smi_thresholds()
    if not smi_t:
        rep.line("SKIP", env.label, "field temperature thresholds", "nvidia-smi -q shows none")
        return
    bad = [f"GPU {i} {k}: agent {gpus.get(i, {}).get(k)}, nvidia-smi {v:g}"
           for i, found in smi_t.items() for k, v in found.items() if gpus.get(i, {}).get(k) != v]
    rep.check(not bad, env.label, "field temperature thresholds", "; ".join(bad) or "agree")


def check_reasons(rep: Report, env: Env, gpus: dict[int, dict[str, Any]]) -> None:
    values = smi_query_gpu("clocks_event_reasons.active") or smi_query_gpu("clocks_throttle_reasons.active")
    if values is None:
        rep.line("SKIP", env.label, "field clocks_event_reasons.active", "this nvidia-smi lacks the column")
        return
    bad = []
    for index, raw in values.items():
        try:
            mask = int(raw, 16)
        except ValueError:
            continue
        theirs = {name for bit, name in THROTTLE_BITS.items() if mask & bit} - FLICKER
        ours = set(gpus.get(index, {}).get("throttle_reasons") or []) - FLICKER
        if ours != theirs:
            bad.append(f"GPU {index}: agent {sorted(ours)}, nvidia-smi {sorted(theirs)}")
    rep.check(not bad, env.label, "field clocks_event_reasons.active (live)", "; ".join(bad) or "agree")


def check_workload(rep: Report, env: Env, busy: float = 5.0, idle: float = 10.0) -> None:
    argv = [sys.executable, str(HERE / "cuda_load.py"), "--busy", str(busy), "--idle", str(idle)]
    load = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = load.stdout.readline() if load.stdout else ""
    if not first:
        load.wait(30)
        err = load.stderr.read().strip() if load.stderr else ""
        if load.returncode == 77:
            rep.line("SKIP", env.label, "workload", f"no CUDA driver here ({err})")
        else:
            rep.line("FAIL", env.label, "workload", f"cuda_load.py exit {load.returncode}: {err}")
        return
    phases = {json.loads(first)["phase"]: json.loads(first)}
    apps: list[tuple[int, float, str]] = []
    with streaming(env, "--interval", "0.5") as (frames, _errors):
        assert load.stdout is not None
        for line in load.stdout:
            event = json.loads(line)
            phases[event["phase"]] = event
            if event["phase"] == "idle":
                time.sleep(2)
                apps = smi_apps()
        load.wait(60)
    pid = int(phases["busy"]["pid"])
    t_busy, t_idle = phases["busy"]["t"], phases.get("idle", {}).get("t", 0.0)
    t_done = phases.get("done", {}).get("t", 0.0)
    rep.check(load.returncode == 0 and "done" in phases, env.label, "workload ran",
              f"exit {load.returncode}, phases {sorted(phases)}")
    mine = [(s["ts"], p, g) for s in snapshots(frames) for g in s["gpus"] for p in g.get("processes") or []
            if p["pid"] == pid]
    smi_row = next((a for a in apps if a[0] == pid), None)
    idle_rows = [(p, g) for ts, p, g in mine if t_idle + 2 <= ts <= t_done - 0.5]
    agent_mib = None if not idle_rows else (idle_rows[-1][0].get("gpu_memory") or 0) / MIB
    close = smi_row is not None and agent_mib is not None and abs(agent_mib - smi_row[1]) <= max(
        64, 0.05 * smi_row[1])
    rep.check(close and smi_row is not None and smi_row[1] >= 1024 and idle_rows[-1][1]["uuid"] == smi_row[2],
              env.label, "workload pid and memory vs nvidia-smi",
              f"pid {pid}: agent {agent_mib} MiB, nvidia-smi {smi_row}")
    check_attribution(rep, env, pid, [p for _, p, _ in mine])
    busy_sm = [p.get("sm_util") for ts, p, _ in mine if t_busy + 1.5 <= ts <= t_idle - 0.5]
    rep.check(bool(busy_sm) and max(x or 0 for x in busy_sm) > 0, env.label, "workload sm_util while busy",
              f"{busy_sm}")
    idle_sm = [p.get("sm_util") for p, _ in idle_rows]
    rep.check(bool(idle_sm) and all(x == 0 for x in idle_sm), env.label, "workload sm_util while idle",
              f"{idle_sm} (exactly 0, never null)")


def check_attribution(rep: Report, env: Env, pid: int, seen: list[dict[str, Any]]) -> None:
    if not seen:
        rep.line("FAIL", env.label, "workload user/command/start vs /proc", f"pid {pid} never listed")
        return
    p = seen[-1]
    user = pwd.getpwuid(os.getuid()).pw_name
    ticks = os.sysconf("SC_CLK_TCK")
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    try:
        started = boot + int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
    except OSError:
        started = None  # it has exited: compare with what the agent said
    ok = (p.get("user") == user and "cuda_load.py" in (p.get("command") or "")
          and started is not None and abs((p.get("start_time") or 0) - started) <= 2)
    rep.check(ok, env.label, "workload user/command/start vs /proc",
              f"agent {p.get('user')!r} {p.get('command')!r} {p.get('start_time')}, /proc {user!r} {started}")


def check_unprivileged(rep: Report, env: Env, user: str = "nobody") -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        rep.line("SKIP", env.label, f"unprivileged ({user})", "needs root and setpriv to become another user")
        return
    pw = pwd.getpwnam(user)
    # An interpreter under a folder others may not enter (a venv in /root) needs the read-search capability
    # to start at all; it gives no NVML privilege (the uid stays unprivileged).
    reach = [] if all(_reachable(p) for p in (sys.executable, str(REPO))) else [
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    as_user = Env(f"{env.label} as {user}", env.pythonpath,
                  ("setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *reach, "--"))
    snap, err = once(as_user)
    if snap is None:
        rep.line("FAIL", as_user.label, "unprivileged --once", err)
        return
    bad = {g["index"]: g.get("error") or g.get("processes_error") for g in snap["gpus"]
           if g.get("error") or g.get("processes_error")}
    rep.check(bool(snap["gpus"]) and not bad, as_user.label, "unprivileged --once",
              f"{len(snap['gpus'])} GPUs"
              + (f", unreadable: {bad}" if bad else ", every GPU and process list read"))


def _reachable(path: str) -> bool:
    """Every folder above ``path`` (links resolved) lets others search it."""
    p = Path(os.path.realpath(path)).parent
    while True:
        if not os.stat(p).st_mode & 0o001:
            return False
        if p == p.parent:
            return True
        p = p.parent


# ------------------------------------------------------------------------------------------ set-up


def package_view(root: Path) -> Path:
    """gpufleet/agent -> this checkout's agent/, so the agent runs from the checkout with no install."""
    view = root / "view"
    (view / "gpufleet").mkdir(parents=True)
    (view / "gpufleet" / "agent").symlink_to(REPO / "agent")
    return view


def install(wheel: Path, root: Path) -> tuple[str, Path] | str:
    """(version, folder) of one nvidia-ml-py wheel installed offline into its own folder, or why not."""
    m = re.match(r"nvidia_ml_py-([^-]+)-", wheel.name)
    if m is None:
        return f"{wheel.name} is not an nvidia-ml-py wheel"
    target = root / f"nvml-{m.group(1)}"
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
            "--target", str(target), str(wheel)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return (m.group(1), target) if out.returncode == 0 else out.stderr.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheels", type=Path, required=True, help="folder holding nvidia-ml-py wheels")
    p.add_argument("--busy", type=float, default=5.0)
    p.add_argument("--idle", type=float, default=10.0)
    args = p.parse_args(argv)
    if shutil.which("nvidia-smi") is None or smi("-L") is None:
        print("gpu_check: skipped: no usable nvidia-smi (not a GPU host, or the driver is not loaded)")
        return 77
    rep = Report()
    wheels = sorted(args.wheels.glob("nvidia_ml_py-*.whl")) if args.wheels.is_dir() else []
    if not wheels:
        rep.line("FAIL", "setup", "wheels",
                 f"no nvidia_ml_py-*.whl in {args.wheels} (tests/gpu_wheels.sh fetches them)")
    root = Path(tempfile.mkdtemp(prefix="gpu_check-", dir="/tmp"))
    try:
        root.chmod(0o755)  # the unprivileged check reads the view and the wheels' folders
        view = package_view(root)
        for wheel in wheels:
            got = install(wheel, root)
            if isinstance(got, str):
                rep.line("FAIL", wheel.name, "install", got)
                continue
            version, target = got
            for path in [target, *target.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o055)
            env = Env(f"nvidia-ml-py {version}", f"{target}:{view}")
            check_stream(rep, env)
            check_fields(rep, env)
            check_workload(rep, env, args.busy, args.idle)
            check_unprivileged(rep, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    c = rep.counts
    verdict = "PASS" if c["FAIL"] == 0 and c["PASS"] > 0 else "FAIL"
    print(f"gpu_check: {verdict} ({c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
