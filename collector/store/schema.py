"""The database schema as an append-only list of migrations, versioned by ``PRAGMA user_version``.

Never edit a released migration: add a new one. Each runs in its own ``BEGIN IMMEDIATE`` transaction and
re-reads the version inside it, so two processes opening a new file at once cannot both migrate.

Layout, and why:
- ``gpus`` is keyed by (host, NVML UUID): a GPU moved to another slot keeps its id and its history
  (``gpu_placements`` records which slot from when); the same UUID from two hosts is two GPUs (v3).
- Raw samples are ``chunks`` (v8; before it one ``samples`` row per GPU per second): per host and minute its
  GPUs' readings packed by column (store/chunkcodec.py), stored in pieces of 600 bytes (store/chunkrows.py:
  rows that fill pages), and ``chunk_parts``, the head: what was flushed of the minutes not compacted yet
  (store/head.py). Pieces are too large for WITHOUT ROWID (whose inner pages would hold whole rows): a
  rowid table, written in time order; a chunk's pieces are consecutive rows, and only its first piece
  (``piece`` 0, which holds the count in ``pieces``) is indexed, unique by (host_id, span).
- ``samples_1m`` and ``samples_1h`` are WITHOUT ROWID tables keyed (gpu_id, time): one b-tree, compact,
  range scans per GPU.
- ``processes`` stores *spans* (one row per process per GPU, identified by pid + start time), updated on
  each snapshot, instead of one row per process per second.
- ``usage`` holds GPU-seconds per (hour, host, gpu, user), so GPU-hours over any range is a small SUM.
- ``meta`` keeps rollup progress and retention horizons (what the queries may rely on);
  ``rollup_dirty`` lists minutes that received samples after they were rolled up.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final, TypeAlias

from gpufleet.collector.errors import StorageError
from gpufleet.collector.store._db import in_tx
from gpufleet.collector.store.convert import samples_to_chunks

#: A migration step: a statement, or a function run on the connection (a conversion SQL cannot express).
Step: TypeAlias = str | Callable[[sqlite3.Connection], None]

_V1: Final[list[Step]] = [
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value
    ) WITHOUT ROWID""",
    """CREATE TABLE hosts (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL DEFAULT 'up',
        reason TEXT,
        since REAL,
        last_seen REAL,
        tags TEXT NOT NULL DEFAULT '[]',
        agent_version TEXT,
        driver_version TEXT,
        nvml_version TEXT,
        cuda_version INTEGER,
        reported_hostname TEXT,
        backend TEXT,
        pid_namespace_ok INTEGER,
        hello_at REAL
    )""",
    """CREATE TABLE gpus (
        id INTEGER PRIMARY KEY,
        uuid TEXT NOT NULL UNIQUE,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        idx INTEGER NOT NULL,
        name TEXT,
        serial TEXT,
        pci_bus_id TEXT,
        memory_total INTEGER,
        power_limit REAL,
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        last_sample REAL
    )""",
    "CREATE INDEX gpus_host ON gpus(host_id, idx)",
    """CREATE TABLE gpu_placements (
        gpu_id INTEGER NOT NULL REFERENCES gpus(id),
        since REAL NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        idx INTEGER NOT NULL,
        PRIMARY KEY (gpu_id, since)
    ) WITHOUT ROWID""",
    """CREATE TABLE samples (
        gpu_id INTEGER NOT NULL,
        ts REAL NOT NULL,
        util INTEGER,
        util_mem INTEGER,
        mem_used INTEGER,
        temp INTEGER,
        power REAL,
        clock_sm INTEGER,
        clock_mem INTEGER,
        fan INTEGER,
        ecc_corrected INTEGER,
        ecc_uncorrected INTEGER,
        throttle TEXT,
        error TEXT,
        PRIMARY KEY (gpu_id, ts)
    ) WITHOUT ROWID""",
    *(
        f"""CREATE TABLE {table} (
        gpu_id INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        n INTEGER NOT NULL,
        util_min REAL, util_mean REAL, util_max REAL,
        mem_min REAL, mem_mean REAL, mem_max REAL,
        temp_min REAL, temp_mean REAL, temp_max REAL,
        power_min REAL, power_mean REAL, power_max REAL,
        PRIMARY KEY (gpu_id, bucket)
    ) WITHOUT ROWID"""
        for table in ("samples_1m", "samples_1h")
    ),
    """CREATE TABLE processes (
        id INTEGER PRIMARY KEY,
        gpu_id INTEGER NOT NULL REFERENCES gpus(id),
        pid INTEGER NOT NULL,
        start_time REAL NOT NULL,
        start_known INTEGER NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        gpu_idx INTEGER NOT NULL,
        user TEXT,
        uid INTEGER,
        command TEXT,
        kind TEXT,
        container TEXT,
        pod TEXT,
        job TEXT,
        attributed INTEGER NOT NULL,
        state TEXT,
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        gpu_memory INTEGER,
        max_gpu_memory INTEGER,
        sm_util INTEGER,
        sm_sum REAL NOT NULL,
        sm_count INTEGER NOT NULL,
        UNIQUE (gpu_id, pid, start_time)
    )""",
    "CREATE INDEX processes_gpu_last ON processes(gpu_id, last_seen)",
    "CREATE INDEX processes_last ON processes(last_seen)",
    """CREATE TABLE usage (
        hour INTEGER NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        gpu_id INTEGER NOT NULL REFERENCES gpus(id),
        user TEXT NOT NULL,
        held REAL NOT NULL,
        used REAL NOT NULL,
        wasted REAL NOT NULL,
        PRIMARY KEY (hour, host_id, gpu_id, user)
    ) WITHOUT ROWID""",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        gpu_index INTEGER,
        uuid TEXT,
        xid INTEGER,
        received REAL
    )""",
    # NULLs are distinct in a UNIQUE index, so the optional fields are keyed through ifnull()
    """CREATE UNIQUE INDEX events_key ON events(host_id, ts, kind, ifnull(gpu_index, -1), ifnull(uuid, ''),
        ifnull(xid, -1), message)""",
    "CREATE INDEX events_ts ON events(ts)",
    """CREATE TABLE alerts (
        fingerprint TEXT PRIMARY KEY,
        rule TEXT NOT NULL,
        severity TEXT NOT NULL,
        state TEXT NOT NULL,
        labels TEXT NOT NULL,
        annotations TEXT NOT NULL,
        started_at REAL NOT NULL,
        fired_at REAL,
        resolved_at REAL,
        last_notified_at REAL,
        updated_at REAL NOT NULL,
        value REAL
    ) WITHOUT ROWID""",
    "CREATE INDEX alerts_state ON alerts(state, resolved_at)",
    """CREATE TABLE silences (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        matchers TEXT NOT NULL,
        starts_at REAL NOT NULL,
        ends_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        comment TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX silences_ends ON silences(ends_at)",
    # minutes that got a sample after they were rolled up (a late frame, an agent whose clock runs behind)
    """CREATE TABLE rollup_dirty (
        gpu_id INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        PRIMARY KEY (gpu_id, bucket)
    ) WITHOUT ROWID""",
]

#: v2: the notification log (collector/notify/nflog.py): per alert group and destination, the newest state
#: not yet accepted there (``pending``, JSON; NULL once delivered), when it was delivered, since when failing.
_V2: Final[list[Step]] = [
    """CREATE TABLE notification_log (
        group_key TEXT NOT NULL,
        notifier TEXT NOT NULL,
        pending TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        failing_since REAL,
        last_error TEXT,
        delivered_at REAL,
        delivered TEXT,
        updated_at REAL NOT NULL,
        PRIMARY KEY (group_key, notifier)
    ) WITHOUT ROWID""",
]

#: v3: GPU-hours of capacity (table ``capacity``); and a GPU's identity is (host, uuid), not the uuid alone:
#: two hosts that report the same UUIDs (a cloned VM image, one machine listed under two names, two fake
#: backends) keep apart histories; the live view flags it (rule ``duplicate_gpu``). SQLite cannot drop a
#: column's UNIQUE, so the table is rebuilt (the documented procedure: :func:`migrate` turns foreign keys
#: off around it and checks them before commit).
_V3: Final[list[Step]] = [
    """CREATE TABLE gpus_v3 (
        id INTEGER PRIMARY KEY,
        uuid TEXT NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        idx INTEGER NOT NULL,
        name TEXT,
        serial TEXT,
        pci_bus_id TEXT,
        memory_total INTEGER,
        power_limit REAL,
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        last_sample REAL,
        UNIQUE (host_id, uuid)
    )""",
    """INSERT INTO gpus_v3 (id, uuid, host_id, idx, name, serial, pci_bus_id, memory_total, power_limit,
        first_seen, last_seen, last_sample)
       SELECT id, uuid, host_id, idx, name, serial, pci_bus_id, memory_total, power_limit,
        first_seen, last_seen, last_sample FROM gpus""",
    "DROP TABLE gpus",
    "ALTER TABLE gpus_v3 RENAME TO gpus",
    "CREATE INDEX gpus_host ON gpus(host_id, idx)",
    # seconds each GPU was sampled, and of those free (nothing allocated): idle capacity in the report
    """CREATE TABLE capacity (
        hour INTEGER NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        gpu_id INTEGER NOT NULL REFERENCES gpus(id),
        observed REAL NOT NULL,
        free REAL NOT NULL,
        PRIMARY KEY (hour, host_id, gpu_id)
    ) WITHOUT ROWID""",
]

#: v4: per-job efficiency records (collector/fleet/jobs.py), one row per job that released its GPUs;
#: ``hosts``, ``gpus`` and ``diagnoses`` are JSON lists. (job_key, started) is unique: a job recorded twice is
#: one row.
_V4: Final[list[Step]] = [
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        job_key TEXT NOT NULL,
        user TEXT NOT NULL,
        command TEXT,
        hosts TEXT NOT NULL,
        gpus TEXT NOT NULL,
        started REAL NOT NULL,
        ended REAL NOT NULL,
        gpu_hours REAL NOT NULL,
        mean_util REAL,
        peak_util REAL,
        peak_memory INTEGER,
        waste_pct REAL,
        diagnoses TEXT NOT NULL,
        UNIQUE (job_key, started)
    )""",
    "CREATE INDEX jobs_ended ON jobs(ended)",
    "CREATE INDEX jobs_user ON jobs(user, ended)",
]

#: v5: what Slurm says of the jobs the agents saw (``slurm_jobs``: one row per job id per host, the one
#: owner of a job's name, user, account, partition and state; processes.job refers to it by (host, job)),
#: and GPU-hours per Slurm job (``slurm_usage``, the same held/used/wasted as ``usage``, keyed by job id
#: whether or not the name is resolved yet), which the report groups by account and partition.
_V5: Final[list[Step]] = [
    """CREATE TABLE slurm_jobs (
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        job TEXT NOT NULL,
        name TEXT,
        user TEXT,
        account TEXT,
        partition TEXT,
        state TEXT,
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        PRIMARY KEY (host_id, job)
    ) WITHOUT ROWID""",
    "CREATE INDEX slurm_jobs_last ON slurm_jobs(last_seen)",
    "CREATE INDEX slurm_jobs_job ON slurm_jobs(job)",  # a job record (jobs.job_key "slurm:ID") names its job
    """CREATE TABLE slurm_usage (
        hour INTEGER NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        gpu_id INTEGER NOT NULL REFERENCES gpus(id),
        job TEXT NOT NULL,
        held REAL NOT NULL,
        used REAL NOT NULL,
        wasted REAL NOT NULL,
        PRIMARY KEY (hour, host_id, gpu_id, job)
    ) WITHOUT ROWID""",
]

#: v6: host maintenance windows (collector/maintenance.py, SQL in store/maintenance.py): the collector keeps
#: no agent session to ``host`` until ``ends_at``; a restarted collector reads the windows still in force.
_V6: Final[list[Step]] = [
    """CREATE TABLE maintenance (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        host TEXT NOT NULL,
        starts_at REAL NOT NULL,
        ends_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        comment TEXT NOT NULL,
        silence_id INTEGER
    )""",
    "CREATE INDEX maintenance_ends ON maintenance(ends_at)",
]

#: v7: GPUs Slurm gave a job and the job never ran on (collector/model/allocation.py). ``slurm_usage`` also
#: counts, per (hour, host, GPU, job), the seconds the GPU was allocated to the running job and, of those, the
#: seconds no process of the job was on it (collector/fleet/accounting.py charges both; a row of a GPU the
#: job never touched has held = used = wasted = 0); ``jobs`` keeps each Slurm job's allocated GPUs and hours,
#: and a Kubernetes pod's names (as the agent resolved them on the node).
_V7: Final[list[Step]] = [
    "ALTER TABLE slurm_usage ADD COLUMN allocated REAL NOT NULL DEFAULT 0",
    "ALTER TABLE slurm_usage ADD COLUMN unused REAL NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN gpus_allocated TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE jobs ADD COLUMN allocated_hours REAL NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN unused_hours REAL NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN pod TEXT",  # a pod's job: JSON [namespace, name, container]
]

#: v8: raw history in chunks (issue 34): one row per host per minute instead of one per GPU per second;
#: the file's raw samples are converted in the migration's transaction (store/convert.py), then dropped.
_V8: Final[list[Step]] = [
    """CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,
        host_id INTEGER NOT NULL,
        span INTEGER NOT NULL,
        piece INTEGER NOT NULL,
        pieces INTEGER NOT NULL DEFAULT 1,
        n INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
    "CREATE UNIQUE INDEX chunks_first ON chunks(host_id, span) WHERE piece = 0",
    """CREATE TABLE chunk_parts (
        id INTEGER PRIMARY KEY,
        host_id INTEGER NOT NULL,
        span INTEGER NOT NULL,
        n INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
    "CREATE INDEX chunk_parts_host ON chunk_parts(host_id, span)",
    samples_to_chunks,
    "DROP TABLE samples",
]

#: MIGRATIONS[i] brings the schema from version i to i + 1.
MIGRATIONS: Final[list[list[Step]]] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8]
LATEST: Final = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to :data:`LATEST`; returns the version found. Idempotent; refuses a newer file."""
    found = user_version(conn)
    if found > LATEST:
        raise StorageError(f"database schema v{found} is newer than this gpufleet understands (v{LATEST}): "
                           "it was written by a newer gpufleet; upgrade gpufleet, or set storage.path to "
                           "another file")
    if found == LATEST:
        return found
    if found == 0 and conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0:
        # lets retention give pages back (PRAGMA incremental_vacuum). Once page 1 exists (switching to WAL
        # writes it) the mode only changes through a VACUUM, which is instant on an empty file.
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")

    def run() -> None:
        current = user_version(conn)  # another process may have migrated while we waited for the lock
        for version in range(current, LATEST):
            for step in MIGRATIONS[version]:
                try:
                    if isinstance(step, str):
                        conn.execute(step)
                    else:
                        step(conn)
                except Exception as exc:
                    what = step.split("(")[0].strip() if isinstance(step, str) else step.__name__
                    raise StorageError(f"migrating the database from v{current} to v{LATEST} failed at "
                                       f"v{version + 1} ({what}: {type(exc).__name__}: {exc}); the file is "
                                       f"unchanged (still v{current})") from exc
            conn.execute(f"PRAGMA user_version={version + 1}")
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise StorageError(f"migration to v{LATEST} left {len(broken)} dangling references "
                               f"(first: {broken[0]}); the file is unchanged")

    # a table rebuild (v3) drops a referenced table: foreign keys are off for it (the pragma is a no-op
    # inside a transaction) and checked by hand above, before the commit
    fk = int(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        in_tx(conn, run)
    except StorageError:
        raise
    except Exception as exc:  # most writes of a migration happen at its commit (a full disk shows there)
        raise StorageError(f"migrating the database from v{found} to v{LATEST} failed writing it "
                           f"({type(exc).__name__}: {exc}); the file is unchanged (still v{found})") from exc
    finally:
        conn.execute(f"PRAGMA foreign_keys={fk}")
    return found


def check_readable(conn: sqlite3.Connection) -> None:
    """For read-only opens: the file must already be at this code's schema version."""
    found = user_version(conn)
    if found == 0:
        raise StorageError("the database has no gpufleet schema yet (start the collector once)")
    if found != LATEST:
        older = "older" if found < LATEST else "newer"
        raise StorageError(f"database schema v{found} is {older} than this gpufleet's v{LATEST}; "
                           "start the matching collector to migrate it")
