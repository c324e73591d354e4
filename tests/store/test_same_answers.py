"""Raw history in chunks gives the same answers as the one-row-per-sample store it replaced (issue 34).

The same scripted fleet (tests/store/answers_child.py: moving readings, nulls, texts, a lost GPU, a slot
change, a gap, late frames into minutes already rolled up, a clock step back, frames sent twice, raw
retention) goes into the store of main before chunks (oldtree.BEFORE_CHUNKS, run from ``git archive`` through
tests/oldtree.py) and into this tree's, each in its own process; then every answer both give is compared:
``history`` (raw, 1-minute and 1-hour, merged wider; per GPU and per user; JSON and the CLI's CSV), the web
page's chart data, stored status and hosts, processes, usage, events, the report in its three formats and
the job records. Twice: right after the fleet stops, and an hour later, once hour rollups and raw
retention have run.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from tests import oldtree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _steps(tree: Path | None, db: Path, t0: float) -> list[dict[str, Any]]:
    answers = []
    for step in ("ingest", "answer", "later", "answer"):
        out = db.with_suffix(f".{len(answers)}.json")
        args = ["-m", "tests.store.answers_child", step, str(db), repr(t0)]
        done = oldtree.run(tree, args + ([str(out)] if step == "answer" else []), timeout=280)
        assert done.returncode == 0, done.stderr[-3000:]
        if step == "answer":
            answers.append(_comparable(json.loads(out.read_text())))
    return answers


def _comparable(answers: dict[str, Any]) -> dict[str, Any]:
    """The JSON report says when it was made (the wall clock): the one field that may differ."""
    for key, value in answers.items():
        if key.startswith("report") and '"generated_at"' in value["text"]:
            report = json.loads(value["text"])
            report["generated_at"] = None
            value["text"] = json.dumps(report, sort_keys=True)
    return answers


def test_the_chunk_store_answers_as_the_old_one_did(tmp_path: Path) -> None:
    old = oldtree.view_or_skip()
    t0 = float(math.floor(time.time() / 3600) * 3600 - 5 * 3600)
    before = _steps(old, tmp_path / "old.db", t0)
    after = _steps(None, tmp_path / "new.db", t0)
    for phase, (a, b) in enumerate(zip(before, after, strict=True)):
        assert a.keys() == b.keys()
        differ = [key for key in a if a[key] != b[key]]
        assert not differ, f"phase {phase}: {len(differ)} answers differ, first {differ[0]!r}: " \
                           f"{json.dumps(a[differ[0]])[:600]} != {json.dumps(b[differ[0]])[:600]}"
    # the answers are about something: raw, 1-minute and 1-hour series, spans, job records
    first = before[0]
    resolutions = {s["resolution"] for k, v in first.items()
                   if k.startswith("history") and not k.endswith("csv") for s in v["series"]}
    assert resolutions == {"raw", "1m", "1h"}
    assert first["jobs"] and first["processes"] and first["history c the step 500 csv"].count("\n") > 100
