"""Issue 12 item 4: the collector's receive time bounds a frame's time; a skewed host is flagged."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

from tests.builders import stored_samples
from tests.cli.cli_testkit import cli_env, run_cli
from tests.hostile.hostile_testkit import collector_over, snapshot

YEARS_10 = 10 * 365.25 * 86400


def _q(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _usage(db: Path, uuid: str) -> float:
    rows = _q(db, "SELECT sum(u.held) FROM usage u JOIN gpus g ON g.id = u.gpu_id WHERE g.uuid = ?", uuid)
    return float(rows[0][0] or 0.0)


def _proc(start: float) -> list[dict[str, object]]:
    return [{"pid": 777, "user": "alice", "command": "train", "gpu_memory": 4 << 30, "start_time": start}]


async def test_one_snapshot_ten_years_ahead_does_not_poison_the_gpu() -> None:
    now = time.time()
    future = snapshot("GPU-ahead-0", ts=now + YEARS_10, seq=1, processes=_proc(now - 100))
    steady = snapshot("GPU-ahead-0", seq=2, processes=_proc(now - 100))
    async with collector_over({"ahead": [future, steady]}, repeat={"ahead"}) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("ahead").frames >= 10, "frames")
        await fleet.wait(lambda: _usage(db, "GPU-ahead-0") > 0.5, "GPU-seconds credited after the jump")
        newest = max(r[1] for r in stored_samples(db))
        spans = _q(db, "SELECT start_time, last_seen FROM processes WHERE pid = 777")
        lag = fleet.state("ahead").lag
    assert isinstance(newest, float) and newest < time.time() + 1
    assert len(spans) == 1, spans
    start, last_seen = spans[0]
    assert abs(float(start) - (now - 100)) < 1 and float(last_seen) > now  # the span goes on
    assert lag is not None and abs(lag) < 5  # the stamps agree again: the flag cleared


async def test_clock_stepped_back_600s_is_restamped_flagged_and_credited() -> None:
    t0 = time.time()
    before = [snapshot("GPU-back-0", ts=t0 + i * 0.1, seq=i, processes=_proc(t0 - 50)) for i in range(5)]
    # then the agent's clock steps back 600 s
    after = snapshot("GPU-back-0", seq=9, processes=_proc(t0 - 50)).replace("@NOW@", "@NOW-600@")
    async with collector_over({"back": [*before, after], "good": []}, repeat={"back"}) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("back").frames >= 10, "frames")
        st = fleet.state("back")
        assert st.clock_skew is not None and abs(st.clock_skew - 600) < 5, st.clock_skew
        assert fleet.state("good").clock_skew is None
        await fleet.collector.store.flush()  # GPU-hours and spans are written every 10 s, or on a flush
        credited = _usage(db, "GPU-back-0")
        await asyncio.sleep(2.0)
        await fleet.collector.store.flush()
        assert _usage(db, "GPU-back-0") - credited > 1.0  # the 600 s step does not stop accounting
        spans = _q(db, "SELECT start_time, last_seen FROM processes WHERE pid = 777")
        assert len(spans) == 1 and float(spans[0][1]) > time.time() - 2, spans  # the span goes on
        await fleet.wait(lambda: any(a.rule == "clock_skew" and a.state == "firing"
                                     for a in fleet.collector.alerts.active()), "clock_skew fires")
        env = cli_env(fleet.home, GPUFLEET_SOCKET=fleet.collector.api_socket)
        hosts = await run_cli("hosts", "--json", env=env)
        status = await run_cli("status", env=env)
        code, text = await fleet.metrics()
    info = {h["name"]: h for h in json.loads(hosts.out)}
    assert abs(info["back"]["clock_skew"] - 600) < 5 and info["good"]["clock_skew"] is None
    assert "clock_skew" in status.out, status.out
    assert code == 200 and 'gpufleet_host_clock_skew_seconds{host="back"}' in text


async def test_ts_minus_1e300_in_a_fresh_db_and_maintenance_runs() -> None:
    future_start = [{"pid": 778, "user": "bob", "gpu_memory": 1 << 30, "start_time": time.time() + 1e6}]
    frames = [snapshot("GPU-neg-0", ts=-1e300, seq=1, processes=_proc(time.time() - 10) + future_start),
              '{"type": "event", "proto": "1.0", "ts": -1e300, "kind": "xid", "xid": 13, "gpu_index": 0}']
    async with collector_over({"neg": frames}) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("neg").frames >= 5, "frames")
        await fleet.collector.store.flush()
        await fleet.collector.store.run_maintenance(time.time())  # raised OverflowError on every run
        oldest = min(r[1] for r in stored_samples(db))
        event_ts = _q(db, "SELECT ts FROM events")
        known = dict(_q(db, "SELECT pid, start_known FROM processes"))
    assert isinstance(oldest, float) and oldest > time.time() - 60
    assert len(event_ts) == 1 and float(event_ts[0][0]) > time.time() - 60  # type: ignore[arg-type]
    assert known == {777: 1, 778: 0}  # a start after the sample itself is "unknown", not a span in 12 days
