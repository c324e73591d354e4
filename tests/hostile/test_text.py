"""Issue 12 item 2: text from an agent is made safe once, at decode (lone surrogates, NUL, controls)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.cli.cli_testkit import cli_env, run_cli
from tests.hostile.hostile_testkit import collector_over, snapshot

BAD_USER = "\ud800"  # valid JSON ("\\ud800"), not encodable as UTF-8
NUL_USER = "bo\x00b"
COMMAND = "python train.py \ud800 --x\x1b[31m\x07"


def _procs() -> list[dict[str, object]]:
    return [
        {"pid": 4242, "user": BAD_USER, "command": COMMAND, "gpu_memory": 1 << 30},
        {"pid": 4343, "user": NUL_USER, "command": "sleep\x00 1", "gpu_memory": 1 << 29},
    ]


def _rows(db: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT user, command FROM processes ORDER BY pid").fetchall()
    finally:
        con.close()


async def test_surrogates_and_nul_in_names_reach_the_store_and_break_nothing() -> None:
    scripts = {"bad": [snapshot("GPU-bad-0", processes=_procs())], "good": []}
    async with collector_over(scripts, repeat={"bad"}) as fleet:
        await fleet.wait(lambda: fleet.state("good").snapshot is not None
                         and fleet.state("bad").frames >= 3, "frames from both hosts")
        assert fleet.state("bad").bad_frames == 0
        code, text = await fleet.metrics()
        assert code == 200, text[:300]
        assert 'host="good"' in text and 'host="bad"' in text
        env = cli_env(fleet.home, GPUFLEET_SOCKET=fleet.collector.api_socket, PYTHONIOENCODING="utf-8")
        for args in (["status"], ["status", "--json"], ["status", "--by", "user"], ["hosts"]):
            res = await run_cli(*args, env=env)
            assert res.rc == 0, (args, res.err[-800:])
            assert "bad" in res.out and "good" in res.out or args[-1] == "user", (args, res.out)
        await fleet.wait(lambda: len(_rows(fleet.home / "db.sqlite")) == 2, "process rows in the store")
        rows = _rows(fleet.home / "db.sqlite")
    assert rows == [("\ufffd", "python train.py \ufffd --x\ufffd[31m\ufffd"), ("bo\ufffdb", "sleep\ufffd 1")]


def test_decode_keeps_ordinary_text_and_pairs() -> None:
    from gpufleet.agent import wire

    procs = [{"pid": 1, "user": "jörg", "command": "a\tb 😀"}]
    frame = wire.decode(snapshot("GPU-x", ts=1.0, processes=procs))
    assert isinstance(frame, wire.Snapshot)
    proc = frame.gpus[0].processes[0]
    assert (proc.user, proc.command) == ("jörg", "a\tb 😀")
