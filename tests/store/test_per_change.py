"""The store's running totals per change (store/accrual.py) are what they were per sample (issue 33).

A churning fleet (tests/churn.py) fed to two stores, one sample as a fresh object each time (every GPU's
stretch lasts one sample: the old per-sample path), one through the 1.3 wire (the edge keeps unchanged
process lists, the stretches add up over many samples), a batch rolled back in the middle of both: the same
spans, the same GPU-hours per user, per Slurm job and the same capacity; and the GPU-hours are
accounting.charge's of each sample, summed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from gpufleet.collector.errors import StorageError
from gpufleet.collector.fleet.accounting import GpuClock, charge
from gpufleet.collector.model.classify import waste_users
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store, Tuning

from tests import churn

SECONDS = 900


def _tables(path: str) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "spans": con.execute(
                "SELECT g.uuid, p.pid, p.start_time, p.user, p.command, p.state, p.first_seen, p.last_seen, "
                "p.max_gpu_memory, p.gpu_memory, p.sm_util, p.sm_sum, p.sm_count FROM processes p "
                "JOIN gpus g ON g.id = p.gpu_id ORDER BY 1, 2, 3").fetchall(),
            "usage": con.execute("SELECT u.hour, g.uuid, u.user, u.held, u.used, u.wasted FROM usage u "
                                 "JOIN gpus g ON g.id = u.gpu_id ORDER BY 1, 2, 3").fetchall(),
            "slurm": con.execute("SELECT u.hour, g.uuid, u.job, u.held, u.used, u.wasted FROM slurm_usage u "
                                 "JOIN gpus g ON g.id = u.gpu_id ORDER BY 1, 2, 3").fetchall(),
            "capacity": con.execute("SELECT c.hour, g.uuid, c.observed, c.free FROM capacity c "
                                    "JOIN gpus g ON g.id = c.gpu_id ORDER BY 1, 2").fetchall(),
        }
    finally:
        con.close()


async def _stored(path: Path, wire_path: bool,
                  fail_once: bool = False) -> dict[str, list[tuple[object, ...]]]:
    config = StorageConfig(path=str(path), batch_max_delay=0.01)
    store = await Store.open(config, tuning=Tuning(accrue_interval=30.0, retry_interval=0.01))
    store.facts = FleetFacts(DEFAULT_THRESHOLDS)  # as the daemon shares the rules' classification
    try:
        for n, (host, snap) in enumerate(churn.fleet(3, SECONDS, wire_path=wire_path)):
            store.submit_snapshot(host, snap, snap.ts)
            if n % 300 == 299:
                if fail_once and n == 1499:
                    _fail_next_commit(store)
                    with pytest.raises(StorageError):  # the awaited flush learns it; the batch is retried
                        await store.flush()
                await store.flush()
    finally:
        await store.close()
    return _tables(str(path))


def _fail_next_commit(store: Store) -> None:
    """The next batch fails once after converting (as a full disk does): it rolls back and is retried."""
    writer = store._writer
    assert writer is not None
    state = writer._state
    apply = state.apply

    def failing(conn: sqlite3.Connection, items: object, rows: object) -> None:
        apply(conn, items, rows)  # type: ignore[arg-type]
        state.apply = apply  # type: ignore[method-assign]
        raise sqlite3.OperationalError("disk I/O error")

    state.apply = failing  # type: ignore[method-assign]


def _approx(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [tuple(pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in row) for row in rows]


async def test_the_totals_per_change_are_the_totals_per_sample(tmp_path: Path) -> None:
    fresh = await _stored(tmp_path / "fresh.db", wire_path=False, fail_once=True)
    changed = await _stored(tmp_path / "changed.db", wire_path=True, fail_once=True)
    assert all(fresh.values()) and len(fresh["spans"]) > 100
    for table in ("spans", "usage", "slurm", "capacity"):
        assert changed[table] == _approx(fresh[table]), table
    # the GPU-hours are the one owner's charges, sample by sample
    want: dict[tuple[str, str], list[float]] = {}
    clocks: dict[tuple[str, str], GpuClock] = {}
    for host, snap in churn.fleet(3, SECONDS, wire_path=False):
        for g in snap.gpus:
            key = (host, g.uuid)
            seconds = clocks.setdefault(key, GpuClock()).tick(snap.ts) or 0.0
            c = charge(host, g, seconds, waste_users(g))
            for user, hours in c.users.items():
                row = want.setdefault((g.uuid, user), [0.0, 0.0, 0.0])
                for i in range(3):
                    row[i] += hours[i]
    got: dict[tuple[str, str], list[float]] = {}
    for _, uuid, user, held, used, wasted in changed["usage"]:
        row = got.setdefault((str(uuid), str(user)), [0.0, 0.0, 0.0])
        for i, v in enumerate((held, used, wasted)):
            row[i] += float(v)  # type: ignore[arg-type]
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key] == pytest.approx(row), key
    assert sum(r[2] for r in want.values()) > 0, "some of it was waste"
