"""Migrations from an empty file, idempotent reopen, refusing newer/unknown files, connection settings."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from gpufleet.collector.errors import StorageError
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import schema
from gpufleet.collector.store.store import Store

from tests.builders import snap, stored_samples
from tests.builders import store_gpu as gpu

TABLES = {"meta", "hosts", "gpus", "gpu_placements", "chunks", "chunk_parts", "samples_1m", "samples_1h",
          "processes", "usage", "events", "alerts", "silences"}


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}


async def test_migrates_empty_file_and_creates_directories(config: StorageConfig) -> None:
    path = config.resolved_path()
    assert not path.parent.exists()
    s = await Store.open(config)
    await s.close()
    assert TABLES <= _tables(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.LATEST
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    conn.close()


async def test_reopen_is_idempotent_and_keeps_data(config: StorageConfig) -> None:
    s = await Store.open(config)
    s.submit_snapshot("h1", snap(gpu(0), ts=1000.0), 1000.5)
    await s.flush()
    await s.close()
    for _ in range(2):
        s = await Store.open(config)
        latest = await s.latest()
        await s.close()
        assert [(host, g.index, snap.ts) for host, snap in latest.items() for g in snap.gpus] == [
            ("h1", 0, 1000.0)]
    with sqlite3.connect(config.resolved_path()) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.LATEST


def test_migrate_twice_on_one_connection(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    assert schema.migrate(conn) == 0
    assert schema.migrate(conn) == schema.LATEST
    assert schema.user_version(conn) == schema.LATEST
    conn.close()


async def test_newer_schema_is_refused(config: StorageConfig) -> None:
    path = config.resolved_path()
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version={schema.LATEST + 1}")
    with pytest.raises(StorageError, match="newer") as err:
        await Store.open(config)
    assert str(err.value).startswith(f"{path}: database schema v{schema.LATEST + 1} is newer")
    assert "upgrade gpufleet" in str(err.value)
    with pytest.raises(StorageError, match="newer") as err:
        await Store.open(config, readonly=True)
    assert str(path) in str(err.value)
    with sqlite3.connect(path) as conn:  # refused without touching it
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.LATEST + 1
        assert conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0


async def test_upgrade_path_from_an_older_version(config: StorageConfig,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written at the current version, then opened by a build with one more migration: the data is
    kept; a migration that fails half-way leaves the file at the old version, unchanged."""
    old = schema.LATEST
    s = await Store.open(config)
    s.submit_snapshot("h1", snap(gpu(0, util=42), ts=1000.0), 1000.0)
    await s.close()
    path = config.resolved_path()

    broken = ["ALTER TABLE hosts ADD COLUMN sm_active REAL", "CREATE INDEX oops ON no_such_table(x)"]
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, broken])
    monkeypatch.setattr(schema, "LATEST", old + 1)
    with pytest.raises(StorageError, match="older"):  # the read-only CLI never migrates
        await Store.open(config, readonly=True)
    with pytest.raises(StorageError, match="no_such_table") as err:
        await Store.open(config)
    assert str(path) in str(err.value)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == old
        assert "sm_active" not in {r[1] for r in conn.execute("PRAGMA table_info(hosts)")}  # rolled back

    fixed = ["ALTER TABLE hosts ADD COLUMN sm_active REAL", "UPDATE hosts SET sm_active = id / 100.0"]
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[:old], fixed])
    s = await Store.open(config)
    try:
        last = (await s.latest("h1"))["h1"]
        assert [(last.ts, g.util_gpu) for g in last.gpus] == [(1000.0, 42)]
        s.submit_snapshot("h1", snap(gpu(0, util=7), ts=1001.0), 1001.0)  # the old INSERT still fits
        await s.flush()
    finally:
        await s.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == old + 1
        assert conn.execute("SELECT name, sm_active FROM hosts ORDER BY id").fetchall() == [("h1", 0.01)]
    assert [(r[1], r[2]) for r in stored_samples(path)] == [(1000.0, 42), (1001.0, 7)]
    ro = await Store.open(config, readonly=True)
    await ro.close()


async def test_readonly_needs_an_existing_migrated_file(config: StorageConfig) -> None:
    with pytest.raises(StorageError, match="no database"):
        await Store.open(config, readonly=True)
    path = config.resolved_path()
    path.parent.mkdir(parents=True)
    sqlite3.connect(path).close()
    with pytest.raises(StorageError, match="no gpufleet schema"):
        await Store.open(config, readonly=True)


async def test_not_a_database_is_a_storage_error(config: StorageConfig) -> None:
    path = config.resolved_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="gpufleet.db"):
        await Store.open(config)


async def test_new_database_is_not_world_readable(tmp_path: Path) -> None:
    """History names users and their command lines: the file and its WAL are owner rw, group r only."""
    old = os.umask(0o022)
    try:
        store = await Store.open(StorageConfig(path=str(tmp_path / "state" / "fleet.db")))
        try:
            await store.flush()
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "state").iterdir()}
        finally:
            await store.close()
    finally:
        os.umask(old)
    assert modes["fleet.db"] == 0o640
    assert all(mode & 0o007 == 0 for mode in modes.values()), modes
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o750


async def test_v2_file_migrates_to_per_host_gpu_identity(config: StorageConfig,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A v2 file (gpus keyed by uuid alone) keeps its GPUs, samples and spans through the v3 rebuild, and
    afterwards the same UUID on another host is a second GPU instead of a move."""
    path = config.resolved_path()
    path.parent.mkdir(parents=True)
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
    monkeypatch.setattr(schema, "LATEST", 2)
    with sqlite3.connect(path, isolation_level=None) as conn:  # what a v2 collector wrote
        schema.migrate(conn)
        conn.execute("INSERT INTO hosts (id, name) VALUES (1, 'h1')")
        conn.execute("INSERT INTO gpus (id, uuid, host_id, idx, first_seen, last_seen, last_sample) "
                     "VALUES (1, 'GPU-A', 1, 0, 1000.0, 1000.0, 1000.0)")
        conn.execute("INSERT INTO gpu_placements VALUES (1, 1000.0, 1, 0)")
        conn.execute("INSERT INTO samples (gpu_id, ts, util) VALUES (1, 1000.0, 42)")
        conn.execute("INSERT INTO processes (gpu_id, pid, start_time, start_known, host_id, gpu_idx, "
                     "attributed, first_seen, last_seen, sm_sum, sm_count) "
                     "VALUES (1, 7, 900.0, 1, 1, 0, 1, 1000.0, 1000.0, 0, 0)")
    monkeypatch.undo()

    s = await Store.open(config)
    s.submit_snapshot("h2", snap(gpu(0, uuid="GPU-A", util=7), ts=1001.0), 1001.0)
    await s.flush()
    h1 = await s.gpu_history("h1", gpu=0, since=999.0, until=1002.0)
    h2 = await s.gpu_history("h2", gpu=0, since=999.0, until=1002.0)
    spans = await s.process_history("h1", since=999.0, until=1002.0)
    await s.close()
    assert [p.util_mean for p in h1[0].points] == [42]
    assert [p.util_mean for p in h2[0].points] == [7]
    assert [p.pid for p in spans] == [7]
    with sqlite3.connect(config.resolved_path()) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.LATEST
        assert conn.execute("SELECT count(*) FROM gpus WHERE uuid = 'GPU-A'").fetchone()[0] == 2
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(gpus)")}
        assert "gpus_host" in indexes
