"""SQLite's -shm and -wal files under a real `gpufleet collector run` (issue 12.6).

A -shm file truncated under the running collector ends it with SIGBUS inside SQLite: that can't be caught,
but it must leave a line in the journal (it left none) and lose no committed history. A -shm file another
user left behind (a collector once run as root) is named at start, with its owner and the fix, instead of
SQLite's "attempt to write a readonly database".
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.store import raw

from tests.cli.cli_testkit import cli_env, start_collector, until, write_config

pytestmark = pytest.mark.slow


def _samples(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return len(raw.all_rows(con))
    finally:
        con.close()


async def test_truncated_shm_is_logged_and_loses_no_committed_sample(home: Path) -> None:
    cfg, db = home / "gpufleet.yaml", home / "gpufleet.db"
    env = cli_env(home)
    async with SimFleet({"n0": "busy", "n1": "busy"}, interval=0.2, workdir=home / "fleet") as fleet:
        write_config(cfg, fleet, home)
        proc = await start_collector(cfg, env)
        try:
            async def stored() -> int:
                try:
                    return _samples(db)
                except sqlite3.OperationalError:  # no file yet, or no tables in it yet
                    return 0

            before = await until(stored)
            os.truncate(db.with_name(db.name + "-shm"), 0)
            _out, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, err.decode()[-2000:])
    assert "Fatal Python error: Bus error" in err.decode()  # the journal says what ended it
    assert _samples(db) >= before  # every sample committed before the crash is still there


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run the collector as another user")
def test_shm_left_by_another_user_is_named_at_start() -> None:
    nobody = pwd.getpwnam("nobody")
    work = Path(tempfile.mkdtemp(prefix="gpufleet-shm-"))
    try:
        work.chmod(0o755)
        db = work / "gpufleet.db"
        con = sqlite3.connect(db)  # a database in WAL mode, its -shm kept by the open connection
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE t (x)")
        con.commit()
        shm = db.with_name(db.name + "-shm")
        kept = shm.read_bytes()
        con.close()
        shm.write_bytes(kept)  # as root left it: owner root, 0644
        shm.chmod(0o644)
        os.chown(work, nobody.pw_uid, nobody.pw_gid)
        os.chown(db, nobody.pw_uid, nobody.pw_gid)
        cfg = work / "gpufleet.yaml"
        cfg.write_text(f"hosts: []\nstorage:\n  path: {db}\napi:\n  socket: {work}/gpufleet.sock\n")
        cfg.chmod(0o644)
        run = subprocess.run(
            ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
             sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c", str(cfg)],
            env={**os.environ, "HOME": str(work)}, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert run.returncode != 0
    assert f"{shm}: not writable by nobody (owner root, mode 0644)" in run.stderr, run.stderr
    assert "chown it to the collector's user" in run.stderr
    assert "Traceback" not in run.stderr
