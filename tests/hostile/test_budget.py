"""Issue 12 item 1: one agent cannot exhaust the collector (per-host budgets, GPU bounds).

Two hosts flood (1 KB events, ~200 KB snapshots, as fast as the pipe takes them) next to a normal host;
the collector drops the excess, says so in one event per interval, flags the hosts (``over_budget``), and the
normal host's samples and the query API stay prompt.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sqlite3
import time
from pathlib import Path

import pytest

from tests.builders import stored_samples
from tests.hostile.hostile_testkit import Fleet, collector_over, line, snapshot

FLOOD_S = 4.0
EVENT = line({"type": "event", "proto": "1.0", "ts": 0.0, "kind": "driver_error", "message": "x" * 1000}
             ).replace('"ts": 0.0', '"ts": @NOW@')
BIG = snapshot("GPU-bytes-0", processes=[{"pid": 10 + i, "user": "u", "command": "c" * 2000, "gpu_memory": 1}
                                         for i in range(100)])


def _q(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _mib(db: Path) -> float:
    return round(sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / (1 << 20), 1)


async def _ping(fleet: Fleet) -> float:
    t0 = time.monotonic()
    reader, writer = await asyncio.open_unix_connection(fleet.collector.api_socket)
    try:
        writer.write(b'{"op":"hosts"}\n')
        assert json.loads(await reader.readline())["ok"]
    finally:
        writer.close()
    return time.monotonic() - t0


async def test_floods_are_dropped_summarised_flagged_and_other_hosts_stay_prompt() -> None:
    scripts = {"events": [EVENT], "bytes": [BIG], "good": []}
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with collector_over(scripts, floods={"events": FLOOD_S, "bytes": FLOOD_S}) as fleet:
        await fleet.wait(lambda: all(fleet.state(h).status == "up" for h in scripts), "hosts up")
        worst_ping, worst_lag, good_frames = 0.0, 0.0, fleet.state("good").frames
        end = time.monotonic() + FLOOD_S
        while time.monotonic() < end:
            worst_ping = max(worst_ping, await _ping(fleet))
            worst_lag = max(worst_lag, fleet.state("good").lag or 0.0)
            await asyncio.sleep(0.05)
        good_frames = fleet.state("good").frames - good_frames
        ev, by = fleet.state("events"), fleet.state("bytes")
        flagged = (getattr(ev, "over_budget", None), getattr(by, "over_budget", None))
        await asyncio.sleep(0.5)
        await fleet.collector.store.flush()
        db = fleet.home / "db.sqlite"
        kept = _q(db, "SELECT count(*) FROM events e JOIN hosts h ON h.id = e.host_id "
                      "WHERE h.name = 'events' AND e.kind = 'driver_error'")[0][0]
        big = {r[0] for r in _q(db, "SELECT id FROM gpus WHERE uuid = 'GPU-bytes-0'")}
        samples = sum(1 for r in stored_samples(db) if r[0] in big)
        figures = {"events stored": kept, "events dropped": getattr(ev, "dropped_events", None),
                   "big samples stored": samples, "big frames dropped": getattr(by, "dropped_frames", None),
                   "good frames during flood": good_frames, "worst good lag s": round(worst_lag, 3),
                   "worst API ping s": round(worst_ping, 3), "db MiB": _mib(db),
                   "peak RSS growth MiB": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) >> 10}
        print("budget figures:", figures)
        assert flagged == (True, True), figures
        await fleet.wait(lambda: {a.labels.get("host") for a in fleet.collector.alerts.active()
                                  if a.rule == "over_budget"} >= {"events", "bytes"}, "over_budget alerts")
        # a host's flag clears a whole summary interval (10 s) after its last drop, on a line that first says
        # what was dropped: once both are clear, both summaries are on their way to the file
        await fleet.wait(lambda: not (fleet.state("events").over_budget or fleet.state("bytes").over_budget),
                         "the flags clear after the flood")
        await fleet.collector.store.flush()
        summaries = [str(m) for (m,) in _q(db, "SELECT message FROM events WHERE kind = 'rate_limited'")]
    assert ev.dropped_events > 1000 and isinstance(kept, int) and kept <= 200 + 20 * (FLOOD_S + 3)
    assert by.dropped_frames > 0 and by.bad_frames == 0 and ev.bad_frames == 0
    assert any("events" in m and "over this host's budget" in m for m in summaries), summaries
    assert any("frames (" in m for m in summaries), summaries
    assert good_frames >= FLOOD_S / 0.1 * 0.5  # the normal host kept streaming
    assert worst_lag < 0.5 and worst_ping < 0.5, figures


async def test_too_many_gpus_or_uuid_churn_refuses_the_stream(caplog: pytest.LogCaptureFixture) -> None:
    wide = json.loads(snapshot("GPU-wide-0", ts=1.0))
    wide["gpus"] = [dict(wide["gpus"][0], index=i, uuid=f"GPU-wide-{i}") for i in range(300)]
    churn = [snapshot(f"GPU-churn-{i}", ts=1.0, seq=i).replace('"ts": 1.0', '"ts": @NOW@')
             for i in range(300)]
    scripts = {"wide": [json.dumps(wide).replace('"ts": 1.0', '"ts": @NOW@')], "churn": churn, "good": []}
    async with collector_over(scripts) as fleet:
        await fleet.wait(lambda: fleet.state("wide").bad_frames >= 1 and fleet.state("churn").bad_frames >= 3,
                         "both refused, churn after reconnecting")
        await fleet.collector.store.flush()
        rows = _q(fleet.home / "db.sqlite", "SELECT count(*) FROM gpus WHERE uuid LIKE 'GPU-churn-%'")[0][0]
        assert fleet.state("good").bad_frames == 0 and fleet.state("good").status == "up"
    closed = " ".join(r.getMessage() for r in caplog.records if "closing the agent stream" in r.getMessage())
    assert "snapshot has 300 GPUs, over the bound of 256 per host" in closed
    assert "more than 256 distinct GPU UUIDs from this host in 24 h" in closed
    assert isinstance(rows, int) and rows <= 256  # across reconnects too
