"""The store: fleet history in one SQLite file (aiosqlite, one writer), and nothing but SQLite.

- :mod:`.store`: the Store facade the daemon, the alert engine, the query API and the CLI call;
- :mod:`.writer`: the one writer task, its bounded queue and batched transactions;
- :mod:`.ingest`: frames to rows, inside the writer's transaction;
- :mod:`.usage`: the GPU-hours tables (what is charged: collector/fleet/accounting.py);
- :mod:`.slurm`: what Slurm said of each job, and GPU-hours per account and partition;
- :mod:`.jobs`: the per-job efficiency records;
- :mod:`.queries`: the reads, plain functions over a connection;
- :mod:`.rollup`: minute and hour rollups, and retention;
- :mod:`.schema`: the append-only migrations;
- :mod:`.shedding`: keeping every k-th snapshot when writes fall behind;
- :mod:`.guard`: one writing collector per file, and a file pulled away;
- :mod:`.nflog`: the notification log's table;
- :mod:`._db`: connection setup, running code on a connection's thread, sqlite errors.
"""
