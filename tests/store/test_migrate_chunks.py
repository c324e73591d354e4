"""A file written by the store before chunks (schema v7, one row per sample) is converted in place on the
first start (v8) and answers as before; a conversion that fails leaves the file as it was and says why.

The file is real: main before chunks (tests/oldtree.py BEFORE_CHUNKS) writes three hours of a scripted fleet
into it (tests/store/answers_child.py). The old code answers from it; then this code opens a copy (the
migration runs), and its answers must be the old ones, exactly: history raw, 1 m, 1 h, CSV, the page's charts,
status, processes, usage, events, report, jobs. An hour later (hour rollups, raw retention, on both sides)
again. For the failure, the copy lies on a small real file system (tmpfs) with 128 KiB left: the conversion
cannot write its chunks, the start fails with the reason, the file's bytes and version stay, and the old code
still answers from it as before.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests import oldtree
from tests.store.test_same_answers import _comparable

#: The schema version of the last store that kept one row per sample, and the first with chunks.
BEFORE, CHUNKS = 7, 8

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _run(tree: Path | None, *args: str) -> str:
    done = oldtree.run(tree, ["-m", "tests.store.answers_child", *args], timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _answers(tree: Path | None, db: Path, t0: float, out: Path) -> dict[str, Any]:
    _run(tree, "answer", str(db), repr(t0), str(out))
    return _comparable(json.loads(out.read_text()))


def _version(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def _differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    assert a.keys() == b.keys()
    return [key for key in a if a[key] != b[key]]


def _old_file(db: Path) -> tuple[Path, float]:
    """The old code, and a file it wrote (frames from ``t0``), at the last version before chunks."""
    old = oldtree.view_or_skip()
    t0 = float(math.floor(time.time() / 3600) * 3600 - 5 * 3600)
    _run(old, "ingest", str(db), repr(t0))
    assert _version(db) == BEFORE
    return old, t0


def test_an_old_file_is_converted_and_answers_as_before(tmp_path: Path) -> None:
    old_db = tmp_path / "old.db"
    old, t0 = _old_file(old_db)
    conn = sqlite3.connect(old_db)
    try:
        rows = conn.execute("SELECT count(*), max(ts) - min(ts) FROM samples").fetchone()
    finally:
        conn.close()
    assert rows[0] > 90_000 and rows[1] > 3600  # hours of raw samples, one row each
    before = _answers(old, old_db, t0, tmp_path / "old.0.json")

    new_db = tmp_path / "new.db"
    shutil.copy(old_db, new_db)
    log = _run(None, "open", str(new_db), repr(t0))
    assert _version(new_db) == CHUNKS and "converted" in log, log[-2000:]
    conn = sqlite3.connect(new_db)
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'samples'").fetchone()[0] == 0
        assert conn.execute("SELECT sum(n) FROM chunks").fetchone()[0] == rows[0]
    finally:
        conn.close()
    after = _answers(None, new_db, t0, tmp_path / "new.0.json")
    differ = _differ(before, after)
    assert not differ, f"{len(differ)} answers differ after the conversion, first {differ[0]!r}"

    _run(old, "later", str(old_db), repr(t0))  # an hour on: hour rollups and raw retention, on both files
    _run(None, "later", str(new_db), repr(t0))
    differ = _differ(_answers(old, old_db, t0, tmp_path / "old.1.json"),
                     _answers(None, new_db, t0, tmp_path / "new.1.json"))
    assert not differ, f"{len(differ)} answers differ an hour later, first {differ[0]!r}"


def test_a_failed_conversion_leaves_the_file_as_it_was_and_says_why(tmp_path: Path, small_fs: Path) -> None:
    made = tmp_path / "old.db"
    old, t0 = _old_file(made)
    before = _answers(old, made, t0, tmp_path / "before.json")
    db = small_fs / "old.db"
    shutil.copy(made, db)
    digest = _digest(db)
    with open(small_fs / "filler", "wb") as filler:  # leave 128 KiB: the conversion needs more
        filler.write(bytes(shutil.disk_usage(small_fs).free - (128 << 10)))

    done = oldtree.run(None, ["-m", "tests.store.answers_child", "open", str(db), repr(t0)], timeout=280)
    assert done.returncode != 0
    said = done.stderr
    assert f"migrating the database from v{BEFORE} to v{CHUNKS} failed" in said
    assert f"the file is unchanged (still v{BEFORE})" in said
    assert "database or disk is full" in said, said[-2000:]

    assert _digest(db) == digest and _version(db) == BEFORE
    differ = _differ(before, _answers(old, db, t0, tmp_path / "after.json"))
    assert not differ, f"the old code answers otherwise after the failed conversion: {differ[:3]}"
