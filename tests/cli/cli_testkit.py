"""Stand-ins for the collector's parts, a synthetic fleet, and a runner for the real `gpufleet` CLI.

The stand-in collector has exactly the attributes the query API reads (config, live, store, alerts,
started_at, stats()), so the API and the CLI are tested end to end over a real Unix socket without SSH.
The bench (tests/bench/cli_bench.py) builds its 1,000-host fleet with the same functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.cli.main import main as cli_main
from gpufleet.cli.options import State
from gpufleet.collector.addresses import Endpoint, Resolver
from gpufleet.collector.errors import QueryError
from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.fleet.report import ReportFormat, WasteReport
from gpufleet.collector.model import sample
from gpufleet.collector.model.codec import jsonable
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import (
    AlertRecord,
    CapacityRow,
    EventRow,
    GpuSeries,
    ProcessSpan,
    SeriesPoint,
    SilenceRecord,
    SlurmUsageRow,
    UsageRow,
)
from gpufleet.collector.model.views import HostRecord
from gpufleet.collector.settings import Config, HostConfig

from tests import builders

GIB = 1 << 30

# --------------------------------------------------------------------------------------- synthetic fleet


def synthetic_snapshot(name: str, scenario: str, gpus: int, now: float, seq: int = 1) -> sample.Snapshot:
    """A snapshot of one host; scenario busy | wasting | hot | lost | idle | zombie."""
    out = []
    for i in range(gpus):
        g = builders.gpu(i, host=name, name="NVIDIA A100-SXM4-80GB", util=85, mem=40 * GIB, temp=62,
                         power=310.0, power_limit=400.0)
        user = ("alice", "bob", "carol")[i % 3]
        proc = builders.proc(1000 + i, user, mem=40 * GIB, sm=80, start=now - 3600 * (i + 1), state="R",
                             command=f"/usr/bin/python3 -u /home/{user}/train.py")
        if scenario == "wasting" and i < 2:
            g.util_gpu = 0
            proc.user, proc.command, proc.sm_util = "dave", "jupyter-lab --no-browser", 0
        if scenario == "hot" and i == 0:
            g.temperature = 91
        if scenario == "zombie" and i == 0:
            proc.state, proc.user, proc.command = "Z", "erin", "python3 leak.py"
        if scenario == "idle" or (scenario == "busy" and i == gpus - 1):
            g.util_gpu, g.memory_used = 0, 0
        else:
            g.processes = [proc]
        if scenario == "lost" and i == 1:
            g = builders.lost_gpu(i, host=name, error="GPU is lost (fell off the bus)")
        out.append(g)
    return builders.snap(*out, ts=now, seq=seq)


def synthetic_live(
    hosts: dict[str, str], gpus: int = 4, now: float | None = None, tags: dict[str, list[str]] | None = None
) -> LiveView:
    """A live view; scenario ``down`` makes a host that is down with no snapshot."""
    now = time.time() if now is None else now
    live = LiveView()
    for name, scenario in hosts.items():
        st = HostState(name=name, tags=list((tags or {}).get(name, [])), since=now - 600)
        if scenario == "down":
            st.status, st.reason, st.last_seen = "down", "ssh: connection refused", now - 180
        else:
            st.status, st.last_seen, st.agent_version, st.backend = "up", now - 0.5, "0.1.0", "fake"
            st.driver_version, st.frames, st.connects = "550.54", 100, 1
            st.snapshot = synthetic_snapshot(name, scenario, gpus, now)
        live.hosts[name] = st
    return live


# ------------------------------------------------------------------------------------------ stand-ins


class StandinAlerts:
    """Alerts derived from the live view by plain rules (wasted: process with util 0; hot: >= 85 C)."""

    def __init__(self, live: LiveView) -> None:
        self.live = live
        self.silences: list[SilenceRecord] = []
        self._next = 1

    def active(self) -> list[AlertRecord]:
        out = []
        for h in self.live.hosts.values():
            if h.status == "down":
                out.append(
                    AlertRecord(
                        fingerprint=f"{h.name}-down",
                        rule="host_down",
                        severity="critical",
                        state="firing",
                        labels={"host": h.name, "rule": "host_down"},
                        annotations={"summary": f"{h.name} is down"},
                        started_at=time.time() - 120,
                        fired_at=time.time() - 120,
                    )
                )
            for g in h.snapshot.gpus if h.snapshot else []:
                for rule in sorted(self._rules(g)):
                    labels = {"host": h.name, "gpu": str(g.index), "rule": rule}
                    if g.processes and g.processes[0].user:
                        labels["user"] = g.processes[0].user
                    out.append(
                        AlertRecord(
                            fingerprint=f"{h.name}-{g.index}-{rule}",
                            rule=rule,
                            severity="warning",
                            state="firing",
                            labels=labels,
                            started_at=time.time() - 900,
                            fired_at=time.time() - 60,
                            annotations={"summary": f"{rule} on {h.name} GPU {g.index}"},
                        )
                    )
        return out

    @staticmethod
    def _rules(g: sample.GpuSample) -> set[str]:
        rules = set()
        if g.processes and (g.util_gpu or 0) < 5:
            rules.add("wasted")
        if (g.temperature or 0) >= 85:
            rules.add("overheating")
        if any(p.state == "Z" for p in g.processes):
            rules.add("stale")
        return rules

    def firing(self) -> Firing:
        return Firing(self.active())

    def is_muted(self, alert: AlertRecord) -> bool:
        return False

    def undelivered(self, alert: AlertRecord) -> dict[str, float]:
        return {}

    async def add_silence(
        self, matchers: dict[str, str], duration: float, comment: str = "", created_by: str = ""
    ) -> SilenceRecord:
        now = time.time()
        rec = SilenceRecord(
            matchers=dict(matchers),
            starts_at=now,
            ends_at=now + duration,
            created_by=created_by,
            comment=comment,
            created_at=now,
            id=self._next,
        )
        self._next += 1
        self.silences.append(rec)
        return rec

    async def list_silences(self, include_expired: bool = False) -> list[SilenceRecord]:
        now = time.time()
        return [s for s in self.silences if include_expired or s.ends_at > now]

    async def expire_silence(self, silence_id: int) -> bool:
        now = time.time()
        for s in self.silences:
            if s.id == silence_id and s.ends_at > now:
                s.ends_at = now
                return True
        return False


class StandinStore:
    """Canned history: a day of 1-minute points per GPU and two process spans per host."""

    def __init__(self, live: LiveView, *, days: float = 1.0, resolution: str = "1m") -> None:
        self.live = live
        self.days = days
        self.resolution = resolution
        self.alerts: list[AlertRecord] = []
        self.shed_by_host: dict[str, int] = {}  # what the writer shed per host (none: keeping up)

    async def hosts(self) -> list[HostRecord]:
        return [
            HostRecord(
                name=h.name,
                status=h.status,
                reason=h.reason,
                last_seen=h.last_seen,
                agent_version=h.agent_version,
                driver_version=h.driver_version,
                tags=list(h.tags),
            )
            for h in self.live.hosts.values()
        ]

    async def latest(self, host: str | None = None) -> dict[str, sample.Snapshot]:
        return {h.name: h.snapshot for h in self.live.hosts.values()
                if h.snapshot is not None and host in (None, h.name)}

    async def gpu_history(
        self, host: str, *, gpu: int | None = None, since: float, until: float, max_points: int = 500
    ) -> list[GpuSeries]:
        h = self.live.hosts[host]
        out = []
        step = max((until - since) / max_points, 60.0)
        for g in h.snapshot.gpus if h.snapshot else []:
            if gpu is not None and g.index != gpu:
                continue
            pts = []
            t = since
            k = 0
            while t < until:
                u = float((k * 7 + g.index * 13) % 100)
                pts.append(
                    SeriesPoint(
                        ts=t,
                        util_mean=u,
                        util_max=min(100.0, u + 5),
                        mem_used_mean=20.0 * GIB,
                        mem_used_max=30.0 * GIB + g.index * GIB,
                        temp_max=70.0,
                        power_mean=250.0,
                    )
                )
                t += step
                k += 1
            out.append(
                GpuSeries(
                    host=host,
                    index=g.index,
                    uuid=g.uuid,
                    name=g.name,
                    resolution=self.resolution,
                    memory_total=g.memory_total,
                    points=pts,
                )
            )
        return out

    async def fleet_history(self, *, since: float, until: float, max_points: int = 120) -> list[GpuSeries]:
        out: list[GpuSeries] = []
        for name in self.live.hosts:
            out += await self.gpu_history(name, since=since, until=until, max_points=max_points)
        return out

    async def process_history(
        self,
        host: str | None = None,
        *,
        gpu: int | None = None,
        user: str | None = None,
        since: float,
        until: float,
    ) -> list[ProcessSpan]:
        out = []
        for h in self.live.hosts.values():
            if host not in (None, h.name):
                continue
            for i, u in enumerate(("alice", "bob")):
                if gpu not in (None, i) or user not in (None, u):
                    continue
                out.append(
                    ProcessSpan(
                        host=h.name,
                        gpu_index=i,
                        uuid=f"GPU-{h.name}-{i}",
                        pid=4000 + i,
                        user=u,
                        command=f"python3 train_{u}.py",
                        first_seen=since + 600,
                        last_seen=until - 600,
                        max_gpu_memory=30 * GIB,
                        mean_sm_util=55.0,
                    )
                )
        return out

    async def usage_by_user(
        self, *, since: float, until: float, host: str | None = None, by_host: bool = False,
        gpu: int | None = None,
    ) -> list[UsageRow]:
        return [
            UsageRow(
                user="alice",
                host=host if by_host else None,
                gpu_hours_held=10.0,
                gpu_hours_used=6.0,
                gpu_hours_wasted=2.5,
            ),
            UsageRow(
                user="bob",
                host=host if by_host else None,
                gpu_hours_held=4.0,
                gpu_hours_used=3.5,
                gpu_hours_wasted=0.0,
            ),
        ]

    async def capacity(self, *, since: float, until: float, host: str | None = None) -> list[CapacityRow]:
        return [CapacityRow(host=host or "n1", gpu_hours_observed=24.0, gpu_hours_free=6.0)]

    async def events(self, *, host: str | None = None, since: float, until: float) -> list[EventRow]:
        return [
            EventRow(
                host=host or "n1",
                ts=until - 300,
                kind="xid",
                message="Xid 79: GPU has fallen off the bus",
                gpu_index=1,
                uuid=None,
                xid=79,
            )
        ]

    async def slurm_usage(self, group: str, *, since: float, until: float,
                          host: str | None = None) -> list[SlurmUsageRow]:
        return []

    async def load_alerts(self, *, active_only: bool = True, since: float | None = None) -> list[AlertRecord]:
        if active_only:
            return [a for a in self.alerts if a.state != "resolved"]
        return [a for a in self.alerts if since is None or a.updated_at >= since]

    async def list_silences(self, *, include_expired: bool = False) -> list[SilenceRecord]:
        return []


class StandinCollector:
    """A running collector as the faces read it (collector/faces/source.py ``Running``)."""

    def __init__(
        self, hosts: dict[str, str], gpus: int = 4, tags: dict[str, list[str]] | None = None
    ) -> None:
        self.config = Config(hosts=[HostConfig(name=n, tags=list((tags or {}).get(n, []))) for n in hosts])
        self.live = synthetic_live(hosts, gpus, tags=tags)
        self.store = StandinStore(self.live)
        self.alerts = StandinAlerts(self.live)
        self.store.alerts.append(
            AlertRecord(
                fingerprint="old",
                rule="overheating",
                severity="critical",
                state="resolved",
                labels={"host": next(iter(hosts)), "gpu": "0", "rule": "overheating"},
                annotations={"summary": "hot", "resolved": "cooled down to 70 C"},
                started_at=time.time() - 7200,
                fired_at=time.time() - 7000,
                resolved_at=time.time() - 3600,
                updated_at=time.time() - 3600,
            )
        )
        self.started_at = time.time() - 42

    def stats(self) -> dict[str, float]:
        return {"hosts_total": float(len(self.live.hosts))}

    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        counts: dict[tuple[str, str, str], int] = {}
        for a in self.alerts.active():
            counts[(a.rule, a.severity, a.state)] = counts.get((a.rule, a.severity, a.state), 0) + 1
        return counts

    def firing(self) -> Firing:
        return self.alerts.firing()

    def identity(self) -> tuple[str, str]:
        return "standin", ""

    async def send_report(self, report: WasteReport, fmt: ReportFormat) -> dict[str, str | None]:
        raise QueryError("no notifiers configured: add one under 'notifiers:' to send reports")


# ------------------------------------------------------------------------------------------ running the CLI


def gpufleet_argv() -> list[str]:
    """The installed console script next to this interpreter (the real entry point), else ``-m``."""
    script = Path(sys.executable).parent / "gpufleet"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gpufleet.cli.main"]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment that finds no config and no default socket/db outside ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_RUNTIME_DIR=str(home / "run"),
        XDG_CONFIG_HOME=str(home / "config"),
        COLUMNS="120",
        LINES="50",
        TERM="dumb",
    )
    env.pop("STATE_DIRECTORY", None)
    env.pop("RUNTIME_DIRECTORY", None)
    env.update(extra)
    return env


@dataclass
class Result:
    rc: int
    out: str
    err: str


async def run_cli(
    *args: str,
    env: dict[str, str],
    cwd: Path | None = None,
    timeout: float = 60.0,
    stdin: bytes | None = None,
) -> Result:
    """Run the real CLI as a subprocess from async code (the server under test shares this loop)."""
    proc = await asyncio.create_subprocess_exec(
        *gpufleet_argv(),
        *args,
        env=env,
        cwd=str(cwd) if cwd else None,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def no_lookups(targets: set[Endpoint]) -> dict[Endpoint, set[Endpoint]]:
    """A resolver for which no name resolves, at once (the system's waits out its deadline offline)."""
    return {}


def run_cli_here(*args: str, resolver: Resolver = no_lookups) -> Result:
    """The real CLI's entry point in this process, with its settings made here (an injected resolver), its
    output and exit code captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(list(args), state=State(resolver=resolver))
            rc = 0
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return Result(rc, out.getvalue(), err.getvalue())


async def until(check: Any, timeout: float = 30.0) -> Any:
    """Poll ``check`` (async) every 0.3 s until it returns something true; that is the result."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.3)
    raise AssertionError(f"condition not met in {timeout} s; last: {last}")


def cell_width(line: str) -> int:
    from rich.cells import cell_len

    return cell_len(line)


def as_dict(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=jsonable))


# ------------------------------------------------------------------------------------------ processes


def children(pid: int) -> dict[int, str]:
    """pid -> command line of ``pid``'s direct children (from /proc, no psutil)."""
    out: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid == pid:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return out


def alive(pid: int, cmd: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        same = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() == cmd
    except OSError:
        return False
    return same and stat[stat.rindex(")") + 2] != "Z"


# ------------------------------------------------------------------------------------------ tmux screens


async def tmux(sock: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``tmux -L sock ARGS`` (a private server per test) and return its stdout."""
    proc = await asyncio.create_subprocess_exec(
        "tmux", "-L", sock, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def pane(sock: str) -> str:
    return await tmux(sock, "capture-pane", "-p", "-t", "gf")


async def pane_until(sock: str, *wants: str, timeout: float = 20.0) -> str:
    """Poll the pane until every one of ``wants`` shows on it (the loop keeps serving meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    text = ""
    while loop.time() < deadline:
        text = await pane(sock)
        if all(w in text for w in wants):
            return text
        await asyncio.sleep(0.2)
    missing = [w for w in wants if w not in text]
    raise AssertionError(f"{missing!r} never appeared on screen; last screen:\n{text}")


def tmux_env(home: Path, **extra: str) -> dict[str, str]:
    """:func:`cli_env` for a program on a real terminal: tmux sets the size, so no COLUMNS/LINES."""
    env = cli_env(home, TERM="xterm-256color", **extra)
    env = {k: v for k, v in env.items() if not k.startswith("TMUX")}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


async def tmux_start(sock: str, cmd: str, width: int, height: int, env: dict[str, str]) -> None:
    """A detached session ``gf`` of ``width`` x ``height`` running the shell command ``cmd``."""
    await tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "gf", "-x", str(width), "-y", str(height),
               cmd, env=env)


def write_config(path: Path, fleet: Any, home: Path, agent_args: Sequence[str] | None = None, *,
                 own_hostnames: bool = False) -> None:
    """A gpufleet.yaml for ``fleet`` (a SimFleet): its hosts at 0.2 s, the history and socket under ``home``,
    wasted after 1 s. ``agent_args``: every host's agent arguments instead of the simulator's;
    ``own_hostnames``: each fake agent reports its host's name (and so its own GPU UUIDs: no duplicate_gpu
    between simulated hosts on one machine)."""
    hosts = []
    for h in fleet.host_configs():
        args = [*(h.agent_args if agent_args is None else agent_args),
                *(["--hostname", h.name] if own_hostnames else [])]
        hosts.append(f"""  - name: {h.name}
    address: {h.address}
    port: {h.port}
    user: {h.user}
    key: {h.key}
    known_hosts: {h.known_hosts}
    interval: 0.2s
    agent_args: [{", ".join(args)}]
    tags: [sim]""")
    path.write_text(f"""hosts:
{chr(10).join(hosts)}
storage:
  path: {home / "gpufleet.db"}
  batch_max_delay: 100ms
api:
  socket: {home / "gpufleet.sock"}
rules:
  wasted:
    for: 1s
""")


# ------------------------------------------------------------------------------------------ the daemon


async def start_collector(cfg: Path, env: dict[str, str], *,
                          stdout: int = asyncio.subprocess.DEVNULL) -> asyncio.subprocess.Process:
    """``gpufleet collector run -c CFG`` in its own process, as an operator (or systemd) starts it; its
    stderr is piped for :func:`stop_collector` to hand back."""
    return await asyncio.create_subprocess_exec(
        *gpufleet_argv(), "collector", "run", "-c", str(cfg), env=env,
        stdout=stdout, stderr=asyncio.subprocess.PIPE)


async def stop_collector(proc: asyncio.subprocess.Process, timeout: float = 30.0) -> str:
    """SIGTERM (as systemd stops it) unless it already exited; waits, reading its pipes so a chatty
    collector never blocks on a full one, and returns its stderr."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    _out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return err.decode(errors="replace") if err else ""


@asynccontextmanager
async def collector_running(cfg: Path, env: dict[str, str], *, stdout: int = asyncio.subprocess.DEVNULL,
                            ) -> AsyncIterator[asyncio.subprocess.Process]:
    """:func:`start_collector`, stopped on the way out; when the body passed, the collector must have
    exited 0 (the tail of its stderr is the failure's message)."""
    proc = await start_collector(cfg, env, stdout=stdout)
    try:
        yield proc
    except BaseException:
        await stop_collector(proc)
        raise
    err = await stop_collector(proc)
    assert proc.returncode == 0, f"collector exited {proc.returncode}: {err[-2000:]}"
