"""``workers: 2`` end to end: one `gpufleet collector run` becomes a supervisor and two worker processes,
each watching its shard of the hosts into its own database; the CLI merges them with no collectors: list;
a worker killed with -9 is started again; SIGTERM stops all of them cleanly, and the CLI then reads each
worker's database; a supervisor killed with -9 takes its workers with it (issue 13: capacity grows with
cores)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.shards import shard_of
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.store import raw

from tests.cli.cli_testkit import cli_env, run_cli, start_collector, stop_collector, until, write_config

pytestmark = pytest.mark.slow
NAMES = [f"n{i}" for i in range(6)]


def _children(pid: int) -> dict[int, str]:
    """pid -> command line of the live processes whose parent is ``pid``."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            out[int(entry.name)] = cmdline
    return out


def _workers(pid: int) -> dict[int, int]:
    """worker index -> pid, from the supervisor's children's --worker argument."""
    found = {}
    for child, cmd in _children(pid).items():
        argv = cmd.split()
        if "--worker" in argv:
            found[int(argv[argv.index("--worker") + 1])] = child
    return found


def _stored_hosts(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        host_of = dict(conn.execute("SELECT g.id, h.name FROM gpus g JOIN hosts h ON h.id = g.host_id"))
        return {host_of[r[0]] for r in raw.all_rows(conn)}
    finally:
        conn.close()


async def test_two_workers_one_fleet(home: Path) -> None:
    cfg = home / "gpufleet.yaml"
    env = cli_env(home)
    async with SimFleet({n: "busy" for n in NAMES}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        cfg.write_text(cfg.read_text() + "workers: 2\n")
        proc = await start_collector(cfg, env)
        try:
            async def all_up() -> Any:
                r = await run_cli("status", "-c", str(cfg), "--json", env=env)
                view = json.loads(r.out) if r.rc == 0 else None
                ok = (view and view["totals"]["hosts_up"] == len(NAMES)
                      and all(h["gpus"] for h in view["hosts"]))
                return view if ok and r.err == "" else None

            view = await until(all_up, timeout=60)
            assert sorted(h["name"] for h in view["hosts"]) == NAMES
            workers = _workers(proc.pid)
            assert sorted(workers) == [1, 2], _children(proc.pid)

            for i in (1, 2):  # each worker wrote only its shard's hosts, into its own file
                db = home / f"gpufleet.w{i}.db"
                mine = {n for n in NAMES if shard_of(n, 2) == i}
                assert await until(lambda db=db, mine=mine: asyncio.sleep(0, _stored_hosts(db) == mine))
            assert not (home / "gpufleet.db").exists(), "the supervisor itself stores nothing"

            os.kill(workers[1], signal.SIGKILL)  # a worker dies: the supervisor starts it again

            async def restarted() -> Any:
                now = _workers(proc.pid)
                return now if sorted(now) == [1, 2] and now[1] != workers[1] else None

            again = await until(restarted, timeout=30)
            assert again[2] == workers[2], "the other worker was left alone"
            view = await until(all_up, timeout=60)
            r = await run_cli("hosts", "-c", str(cfg), "--json", env=env)
            assert r.rc == 0
            assert {h["name"]: h["status"] for h in json.loads(r.out)} == {n: "up" for n in NAMES}
        finally:
            err = await stop_collector(proc)
        assert proc.returncode == 0, err[-3000:]
        assert "worker 1 (pid" in err and "starting it again" in err, "the restart is in the journal"
        assert not _children(proc.pid) and not any(p.exists() for p in home.glob("gpufleet.w*.sock"))

        # every worker stopped: the CLI reads each worker's database, as it reads the one collector's
        r = await run_cli("status", "-c", str(cfg), "--json", env=env)
        assert r.rc == 0, r.err
        stored = json.loads(r.out)
        assert stored["source"] == "store" and sorted(h["name"] for h in stored["hosts"]) == NAMES
        for i in (1, 2):
            assert f"showing stored data from {home / f'gpufleet.w{i}.db'}" in r.err, r.err

        proc = await start_collector(cfg, env)  # kill -9 of the supervisor: its workers go with it
        try:
            async def both() -> dict[int, int] | None:
                found = _workers(proc.pid)
                return found if len(found) == 2 else None

            workers = await until(both, timeout=30)
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()

            async def gone() -> bool:
                alive = []
                for pid in workers.values():
                    try:
                        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    except OSError:
                        continue
                    if state != "Z":
                        alive.append(pid)
                return not alive

            await until(gone, timeout=45)
        finally:
            await stop_collector(proc)
