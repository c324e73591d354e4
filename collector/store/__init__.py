"""Storage: SQLite history (aiosqlite), one writer task, rollups and retention."""

from gpufleet.collector.store.store import Store, Tuning

__all__ = ["Store", "Tuning"]
