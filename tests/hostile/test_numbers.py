"""Issue 12 item 3: numbers are range-checked at decode; deep nesting is a bad frame, not a crash."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from gpufleet.agent import wire
from gpufleet.collector.store import raw

from tests.hostile.hostile_testkit import collector_over, snapshot

HUGE = 10 ** 30  # passes json, not SQLite's INTEGER


def _samples(db: Path, uuid: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        ids = {r[0] for r in con.execute("SELECT id FROM gpus WHERE uuid = ?", (uuid,))}
        return [(r[4], r[11], r[5]) for r in raw.all_rows(con) if r[0] in ids]
    finally:
        con.close()


async def test_out_of_range_readings_are_nulled_counted_and_stored() -> None:
    bad = snapshot("GPU-bad-0", memory_used=HUGE, ecc_uncorrected=-1, ecc_corrected=HUGE, temperature=4000)
    async with collector_over({"bad": [bad], "good": []}, repeat={"bad"}) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("bad").frames >= 5 and fleet.state("good").frames >= 5, "frames")
        await fleet.wait(lambda: len(_samples(db, "GPU-bad-0")) >= 3, "samples of the hostile GPU stored")
        st = fleet.state("bad")
        assert st.status == "up" and st.bad_frames == 0
        assert st.nulled_values >= 4 * 3 and "outside" in st.last_nulled
        assert set(_samples(db, "GPU-bad-0")) == {(None, None, None)}
        await asyncio.sleep(0.5)  # rules run on each snapshot: no ECC alert from "-1"
        assert not [a for a in fleet.collector.alerts.active() if a.rule == "ecc"]
        code, text = await fleet.metrics()
        assert code == 200
        assert 'gpufleet_host_wire_ignored_total{host="bad",what="value"}' in text


async def test_bad_identities_and_deep_nesting_are_bad_frames_and_other_hosts_go_on(
        caplog: pytest.LogCaptureFixture) -> None:
    deep = '{"type":"snapshot","proto":"1.0","ts":1,"gpus":' + "[" * 100_000 + "]" * 100_000 + "}"
    cases = {
        "deep": [deep],
        "pid": [snapshot("GPU-pid-0", processes=[{"pid": HUGE}])],
        "negidx": [snapshot("GPU-negidx-0", index=-1)],
        "seq": [snapshot("GPU-seq-0", seq=HUGE)],
        "good": [],
    }
    async with collector_over(cases) as fleet:
        bad = [n for n in cases if n != "good"]
        await fleet.wait(lambda: all(fleet.state(n).bad_frames >= 1 for n in bad), "bad frames counted")
        closed = [r.getMessage() for r in caplog.records if "closing the agent stream" in r.getMessage()]
        reasons = {n: " ".join(m for m in closed if m.startswith(f"{n}: ")) for n in bad}
        await fleet.wait(lambda: fleet.state("good").frames >= 5, "the good host streams")
        assert fleet.state("good").bad_frames == 0 and fleet.state("good").status == "up"
    assert "nested too deeply" in reasons["deep"]
    assert "'pid'" in reasons["pid"] and "outside 0..2147483647" in reasons["pid"]
    assert "'index' = -1" in reasons["negidx"]
    assert "'seq'" in reasons["seq"]


async def test_query_api_answers_a_deeply_nested_request() -> None:
    async with collector_over({"good": []}) as fleet:
        reader, writer = await asyncio.open_unix_connection(fleet.collector.api_socket)
        try:
            writer.write(b'{"op":"status","args":' + b"[" * 20_000 + b"]" * 20_000 + b"}\n")
            answer = json.loads(await asyncio.wait_for(reader.readline(), 10))
            writer.write(b'{"op":"hosts"}\n')  # the connection is still good
            hosts = json.loads(await asyncio.wait_for(reader.readline(), 10))
        finally:
            writer.close()
    assert answer == {"ok": False, "error": "request is not valid JSON: nested too deeply"}
    assert hosts["ok"] is True


def test_decode_bounds() -> None:
    line = snapshot("u", ts=1.0, temperature=-300, power_draw=1e9, fan_speed=120, util_gpu=-5)
    notes = wire.DecodeNotes()
    frame = wire.decode(line, notes=notes)
    assert isinstance(frame, wire.Snapshot)
    g = frame.gpus[0]
    assert (g.temperature, g.power_draw, g.fan_speed, g.util_gpu) == (None, None, 120, 0)
    assert notes.out_of_range == 2
    assert json.loads(wire.encode(frame))["gpus"][0]["fan_speed"] == 120
