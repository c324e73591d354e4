"""Storage: SQLite history (aiosqlite), one writer task, rollups and retention."""
