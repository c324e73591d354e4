"""`gpufleet status` at 1,000 hosts and `gpufleet history` over 30 days, timed as a user sees them.

Run by hand: ``.venv/bin/python -m tests.bench.cli_bench [--hosts 1000] [--gpus 8] [--runs 10]``.
Targets: status under 300 ms wall, history of 30 days under 500 ms wall, each measured as a subprocess of the
installed `gpufleet` script (Python start-up and imports included) against a QueryServer on a Unix socket.
The status fleet is synthetic (the CLI tests' stand-in collector); the history comes from a real SQLite
store filled with 30 days of minute and hour rollups for one 8-GPU host.
Status is timed twice: against a server with its default status cache (runs a few hundred ms apart, so most
are served from it) and against one with the cache off (``cold``: every run builds and encodes the view).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.agent import wire
from gpufleet.collector.faces.api.ops import STATUS_CACHE_TTL, encode
from gpufleet.collector.faces.api.server import QueryServer
from gpufleet.collector.fleet import query
from gpufleet.collector.model import codec, sample
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.settings import StorageConfig

from tests.builders import LoopThread
from tests.cli.cli_testkit import StandinCollector, cli_env, gpufleet_argv

TESTS = Path(__file__).resolve().parent.parent

GIB = 1 << 30
DAY = 86400


def timed(argv: list[str], env: dict[str, str], runs: int) -> tuple[list[float], int]:
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # warm
    walls = []
    size = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True)
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {p.stderr.decode()}")
        size = len(p.stdout)
    return walls, size


MISSED: list[str] = []  # what report() found over its target; main() exits 1 when any


def report(name: str, walls: list[float], target_ms: float, extra: str = "") -> None:
    ms = sorted(w * 1000 for w in walls)
    p90 = ms[min(len(ms) - 1, math.ceil(0.9 * len(ms)) - 1)]
    verdict = "ok" if statistics.median(ms) < target_ms else "OVER TARGET"
    if verdict != "ok":
        MISSED.append(f"{name}: median {statistics.median(ms):.0f} ms (target {target_ms:.0f})")
    print(
        f"{name:<44} min {ms[0]:6.0f}  median {statistics.median(ms):6.0f}  p90 {p90:6.0f} ms   "
        f"(target {target_ms:.0f}: {verdict}){extra}"
    )


def in_process(label: str, fn: Callable[[], Any], runs: int = 5) -> Any:
    best, out = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    print(f"  {label:<42} {best * 1000:7.1f} ms")
    return out


# --------------------------------------------------------------------------------------------- shards

FLEET = ("busy", "busy", "wasting", "hot", "idle", "zombie", "lost", "busy")


def fleet_names(hosts: int, offset: int = 0) -> dict[str, str]:
    """node0001.. with the bench's mix of scenarios (node0010 down in the first thousand)."""
    names = {f"node{i + offset:04d}": FLEET[i % 8] for i in range(1, hosts + 1)}
    if "node0010" in names:
        names["node0010"] = "down"
    return names


def serve_shard(sock: Path, hosts: int, offset: int, gpus: int) -> tuple[subprocess.Popen[bytes], Path]:
    """A stand-in collector of ``hosts`` hosts from node{offset+1} in its own process, on ``sock``."""
    # as a module from the checkout's root, as this bench runs: tests is a package (tests.builders)
    proc = subprocess.Popen([sys.executable, "-m", "tests.bench.cli_bench", "--serve-shard", str(sock),
                             "--hosts", str(hosts), "--offset", str(offset), "--gpus", str(gpus)],
                            stdout=subprocess.PIPE, cwd=TESTS.parent)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise SystemExit(f"the shard server on {sock} did not start")
    return proc, sock


def run_shard_server(sock: Path, hosts: int, offset: int, gpus: int) -> None:
    import signal

    lt = LoopThread()
    lt.run(QueryServer(StandinCollector(fleet_names(hosts, offset), gpus=gpus), sock, 0o600).start())
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


# --------------------------------------------------------------------------------------------- history


async def fill_store(db: Path, host: str, gpus: int, now: float, days: int) -> None:
    """Create the schema with the store itself, register the GPUs through ingest, then bulk-insert rollups."""
    from gpufleet.collector.store.store import Store

    start = now - days * DAY - 3600
    store = await Store.open(StorageConfig(path=str(db)))
    hello = wire.Hello(
        agent_version="0.1.0",
        hostname=host,
        ts=start,
        backend="fake",
        gpus=[
            wire.GpuInfo(index=i, uuid=f"GPU-{host}-{i}", name="NVIDIA H100 80GB HBM3", memory_total=80 * GIB)
            for i in range(gpus)
        ],
    )
    store.submit_hello(host, hello, start)
    for ts in (start, now - 1):
        gs = [
            sample.GpuSample(
                index=i,
                uuid=f"GPU-{host}-{i}",
                name="NVIDIA H100 80GB HBM3",
                util_gpu=50,
                memory_total=80 * GIB,
                memory_used=40 * GIB,
                temperature=60,
                power_draw=300.0,
                power_limit=700.0,
                processes=[
                    sample.ProcessSample(
                        pid=100 + i,
                        user="alice",
                        command="python train.py",
                        gpu_memory=40 * GIB,
                        start_time=start,
                    )
                ],
            )
            for i in range(gpus)
        ]
        store.submit_snapshot(host, sample.Snapshot(proto=wire.PROTO_VERSION, ts=ts, seq=0, gpus=gs), ts)
    await store.flush()
    await store.close()

    conn = sqlite3.connect(db)
    ids = [r[0] for r in conn.execute("SELECT id FROM gpus ORDER BY idx")]
    host_id = conn.execute("SELECT id FROM hosts WHERE name = ?", (host,)).fetchone()[0]
    m_lo, m_hi = int(start // 60) * 60, int((now - 120) // 60) * 60
    h_hi = int(m_hi // 3600) * 3600
    with conn:
        for k, gid in enumerate(ids):
            conn.executemany(
                "INSERT OR REPLACE INTO samples_1m VALUES (?,?,60,?,?,?,?,?,?,55,60,70,200,300,400)",
                (
                    (gid, b, 0.0, (b // 60 + k) % 100, 100.0, 30.0 * GIB, 40.0 * GIB, 50.0 * GIB)
                    for b in range(m_lo, m_hi, 60)
                ),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO samples_1h VALUES (?,?,3600,?,?,?,?,?,?,55,60,70,200,300,400)",
                (
                    (gid, b, 0.0, (b // 3600 * 7 + k) % 100, 100.0, 30.0 * GIB, 40.0 * GIB, 50.0 * GIB)
                    for b in range(int(m_lo // 3600) * 3600, h_hi, 3600)
                ),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO usage VALUES (?,?,?,?,1.0,0.5,?)",
                (
                    (h, host_id, gid, ("alice", "bob", "carol")[(h // 3600) % 3], 0.5 if h % 7 == 0 else 0.0)
                    for h in range(int(m_lo // 3600) * 3600, h_hi, 3600)
                ),
            )
            conn.executemany(
                "INSERT OR IGNORE INTO processes (gpu_id, pid, start_time, start_known, host_id, gpu_idx, "
                "user, command, attributed, first_seen, last_seen, max_gpu_memory, sm_sum, sm_count) "
                "VALUES (?,?,?,1,?,?,?,?,1,?,?,?,?,?)",
                (
                    (
                        gid,
                        10_000 + j,
                        m_lo + j * 6 * 3600,
                        host_id,
                        k,
                        ("alice", "bob")[j % 2],
                        f"python job{j}.py",
                        m_lo + j * 6 * 3600,
                        m_lo + j * 6 * 3600 + 5 * 3600,
                        30 * GIB,
                        50.0 * 100,
                        100,
                    )
                    for j in range(days * 4)
                ),
            )
        for key, value in (
            ("m1_upto", m_hi),
            ("h1_upto", h_hi),
            ("m1_from", m_lo),
            ("h1_from", m_lo),
            ("raw_from", now - DAY),
        ):
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
    rows = conn.execute(
        "SELECT (SELECT count(*) FROM samples_1m), (SELECT count(*) FROM samples_1h)"
    ).fetchone()
    conn.close()
    print(f"  store: {rows[0]:,} minute rows, {rows[1]:,} hour rows, {db.stat().st_size / 1e6:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--only", choices=("status", "merged", "history"), action="append",
                    help="Run only these parts (repeatable; default all).")
    ap.add_argument("--serve-shard", type=Path, help=argparse.SUPPRESS)  # the merged line's shard servers
    ap.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_shard:
        run_shard_server(args.serve_shard, args.hosts, args.offset, args.gpus)
        return
    parts = set(args.only or ("status", "merged", "history"))
    # As installed from a wheel (pip compiles every module): an editable checkout under
    # PYTHONDONTWRITEBYTECODE would otherwise compile gpufleet's modules again on every run (~40 ms).
    import compileall

    for sub in ("agent", "collector", "cli"):
        compileall.compile_dir(str(TESTS.parent / sub), quiet=1)

    tmp = Path(tempfile.mkdtemp(prefix="gfbench-", dir="/tmp"))
    env = cli_env(tmp, COLUMNS="160")
    names = fleet_names(args.hosts)
    standin = StandinCollector(names, gpus=args.gpus)
    lt = LoopThread()
    sock = tmp / "gf.sock"
    server = QueryServer(standin, sock, 0o600)
    lt.run(server.start())
    csock = tmp / "gfc.sock"
    cold = QueryServer(standin, csock, 0o600, status_cache_ttl=0)
    lt.run(cold.start())
    print(
        f"gpufleet CLI bench: {args.hosts} hosts x {args.gpus} GPUs, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs"
    )
    try:
        if "status" in parts:
            base = [*gpufleet_argv(), "--socket", str(sock)]
            walls, _ = timed([*gpufleet_argv(), "--version"], env, args.runs)
            report("gpufleet --version (start-up floor)", walls, 300)
            walls, size = timed([*base, "status"], env, args.runs)
            report(f"gpufleet status ({args.hosts} hosts)", walls, 300, f"  {size / 1e6:.1f} MB of output")
            walls, size = timed([*base, "status", "--json"], env, args.runs)
            report("gpufleet status --json", walls, 300, f"  {size / 1e6:.1f} MB")
            walls, _ = timed([*base, "status", "--by", "user"], env, args.runs)
            report("gpufleet status --by user", walls, 300)
            walls, _ = timed([*base, "status", "--host", "node0042"], env, args.runs)
            report("gpufleet status --host node0042", walls, 300)
            print(f"with the server's status cache off (default ttl {STATUS_CACHE_TTL} s above):")
            cbase = [*gpufleet_argv(), "--socket", str(csock)]
            walls, _ = timed([*cbase, "status"], env, args.runs)
            report("gpufleet status, cold", walls, 300)
            walls, _ = timed([*cbase, "status", "--json"], env, args.runs)
            report("gpufleet status --json, cold", walls, 300)
            walls, _ = timed([*cbase, "status", "--by", "user"], env, args.runs)
            report("gpufleet status --by user, cold", walls, 300)

        if "merged" in parts:
            # two shards of --hosts each, merged by the CLI (issue 17: under 500 ms). Each shard's stand-in
            # collector runs in its own process, as shards do (two servers on one loop would build their
            # answers one after the other, and share one GIL).
            shards = [serve_shard(tmp / f"shard{i}.sock", args.hosts, i * args.hosts, args.gpus)
                      for i in range(2)]
            try:
                walls, _ = timed([*gpufleet_argv(), *(a for _p, s in shards for a in ("--collector", str(s))),
                                  "status"], env, args.runs)
                report(f"gpufleet status over 2 shards of {args.hosts} hosts (merged)", walls, 500)
            finally:
                for proc, _s in shards:
                    proc.terminate()
                    proc.wait(10)

        print("in-process parts of `status` (best of 5):")
        view = in_process(
            "build view (server, on its loop)",
            lambda: query.build_fleet_view(
                standin.live.hosts.values(), Firing(standin.alerts.active()), now=time.time()
            ),
        )
        data = in_process("encode objects (server, --json)", lambda: encode({"ok": True, "result": view}))
        print(f"  {'objects size':<42} {len(data) / 1e6:7.1f} MB")
        rows = in_process(
            "encode rows (server, screen)",
            lambda: encode({"ok": True, "result": codec.fleet_view_rows(view)}),
        )
        print(f"  {'rows size':<42} {len(rows) / 1e6:7.1f} MB")
        in_process(
            "decode objects + rebuild model", lambda: codec.fleet_view_from_dict(json.loads(data)["result"])
        )
        decoded = in_process(
            "decode rows + rebuild model (client)",
            lambda: codec.fleet_view_from_dict(json.loads(rows)["result"]),
        )

        def render() -> None:
            import io

            from gpufleet.cli.lines import write_lines
            from gpufleet.cli.render_status import status_lines

            write_lines(status_lines(decoded, 160), io.StringIO(), color=True)

        in_process("lay out + write lines (client, ANSI)", render)
        if "history" not in parts:
            return

        try:
            import gpufleet.collector.store.store  # noqa: F401
        except ImportError:
            print("history: collector.store.store not importable; skipped")
            return
        db = tmp / "history.db"
        now = time.time()
        asyncio.run(fill_store(db, "node0003", 8, now, args.days))
        from gpufleet.collector.store.store import Store

        real = lt.run(Store.open(StorageConfig(path=str(db)), readonly=True))
        standin.store = real  # type: ignore[assignment]
        hsock = tmp / "gfh.sock"
        hserver = QueryServer(standin, hsock, 0o600)
        lt.run(hserver.start())
        hbase = [*gpufleet_argv(), "--socket", str(hsock)]
        walls, _ = timed(
            [*hbase, "history", "--host", "node0003", "--since", f"{args.days}d"], env, args.runs
        )
        report(f"gpufleet history --since {args.days}d (8 GPUs)", walls, 500)
        walls, _ = timed(
            [*hbase, "history", "--host", "node0003", "--gpu", "2", "--since", f"{args.days}d"],
            env,
            args.runs,
        )
        report(f"gpufleet history --gpu 2 --since {args.days}d", walls, 500)
        walls, size = timed(
            [*hbase, "history", "--host", "node0003", "--since", f"{args.days}d", "--csv"], env, args.runs
        )
        report(f"gpufleet history --since {args.days}d --csv", walls, 500, f"  {size / 1e3:.0f} kB")
        walls, _ = timed([*hbase, "history", "--host", "node0003", "--since", "24h"], env, args.runs)
        report("gpufleet history --since 24h", walls, 500)
        fenv = cli_env(tmp, COLUMNS="160", GPUFLEET_SOCKET=str(tmp / "absent.sock"), GPUFLEET_DB=str(db))
        walls, _ = timed(
            [*gpufleet_argv(), "history", "--host", "node0003", "--since", f"{args.days}d"], fenv, args.runs
        )
        report(f"history --since {args.days}d, collector down (fallback)", walls, 500)
        lt.run(hserver.stop())
        lt.run(real.close())
    finally:
        lt.run(server.stop())
        lt.run(cold.stop())
        lt.close()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    for line in MISSED:
        print(f"MISSED: {line}")
    print("all targets met" if not MISSED else f"{len(MISSED)} target(s) missed")
    sys.exit(1 if MISSED else 0)
