"""``gpufleet history`` says what it counts (issue 36, item 7), over a real history file read by the real CLI
(the collector is down: the read-only fallback answers the same op).

Before: HELD FOR 3m where status said 3h, and no word that it counts only what the collector saw;
``--since 2d`` said the samples start at 00:00 when they start at 00:28 (an hour bucket's start); ``--until``
alone failed; ``--user zed`` said "no samples in this range"; an hour's sparklines came from 1-minute
means."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from gpufleet.cli.render_history import HELD_NOTE
from gpufleet.cli.timeparse import fmt_ts
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store

from tests.builders import gpu, proc, snap
from tests.cli.cli_testkit import cli_env, run_cli

GIB = 1 << 30


async def _fill(db: Path, first: float, now: float) -> None:
    """n1 GPU 0: alice's process, started 3 h ago, sampled from ``first`` every 10 s and every second over
    the last 10 minutes; its util saws between 90 % and 10 % every 5 s (an input-bound job)."""
    store = await Store.open(StorageConfig(path=str(db)))
    try:
        t, seq = first, 0
        while t <= now:
            util = 90 if int(t) // 5 % 2 == 0 else 10
            g = gpu(0, uuid="GPU-n1-0", util=util, mem=30 * GIB,
                    procs=[proc(4242, "alice", mem=30 * GIB, start=now - 3 * 3600 - 30,
                                 command="python train.py")])
            store.submit_snapshot("n1", snap(g, ts=t, seq=seq), t)
            seq += 1
            t += 1.0 if now - t <= 600 else 10.0
        await store.flush()
    finally:
        await store.close()


async def test_history_says_what_it_counts_and_reads_times_like_journalctl(home: Path) -> None:
    now = time.time()
    first = math.floor((now - 2 * 3600) / 3600) * 3600 + 28 * 60  # 28 minutes past an hour, ~1.5-2 h ago
    db = home / "data" / "gpufleet" / "gpufleet.db"
    await _fill(db, first, now)
    env = cli_env(home, COLUMNS="120")

    r = await run_cli("history", "--host", "n1", "--since", "2d", env=env)
    assert r.rc == 0, r.err
    # the samples' own start, not the start of the hour their first bucket covers
    assert f"samples only since {fmt_ts(first)[:16]}" in r.out, r.out
    # HELD FOR: what the collector saw, and of how long the process had run
    row = next(line for line in r.out.splitlines() if line.startswith("alice"))
    assert " of 3h00m" in row, row
    assert " ".join(HELD_NOTE.split()) in " ".join(r.out.split())

    r = await run_cli("history", "--host", "n1", "--user", "zed", "--since", "1d", env=env)
    assert r.rc == 0 and "user zed held no GPU on n1 in this range (users seen: alice)" in r.out, r.out
    assert "no samples" not in r.out

    until = time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 30 * 3600))
    r = await run_cli("history", "--host", "n1", "--until", until, env=env)
    assert r.rc == 0 and f"→ {until}" in r.out and "(1d00h)" in r.out, (r.out, r.err)  # the 24 h before it

    r = await run_cli("history", "--host", "n1", "--since", "10 min ago", "--until", "now", "--json", env=env)
    assert r.rc == 0, r.err
    [series] = json.loads(r.out)["series"]
    assert series["resolution"] == "raw" and len(series["points"]) >= 590  # every second, not 10 means
    utils = {p["util_mean"] for p in series["points"]}
    assert utils == {10, 90}  # the sawtooth is there to draw

    r = await run_cli("history", "--host", "n1", "--since", "2m", env=env)
    spark = next(line for line in r.out.splitlines() if line.startswith("  util "))
    blocks = spark[len("  util "):].split("  ")[0]
    assert {"▂", "▇"} <= set(blocks), spark  # 10 % and 90 %: highs and lows, not a flat line
