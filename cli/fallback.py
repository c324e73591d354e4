"""The CLI's answers when the collector is down: the SQLite file, opened read-only, answered by the
collector's own op handlers (:class:`~gpufleet.collector.faces.api.ops.StoreOps`), so the shapes are the
socket's. Loaded only when it is needed: it brings asyncio, aiosqlite and the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.cli.client import API_VERSION, CliError, api_error, one_status_later
from gpufleet.cli.timeparse import fmt_ago
from gpufleet.collector.errors import StorageError
from gpufleet.collector.faces.api.ops import StoreOps, dispatch
from gpufleet.collector.model.codec import plain
from gpufleet.collector.model.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpufleet.collector.model.views import FleetView
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store


class StoreFallback:
    """Answers ops from the SQLite file, opened read-only, with the collector's own handler code."""

    source = "store"
    merged = False

    def __init__(self, db: str | Path, *, notice: Callable[[str], None] | None = None,
                 thresholds: Thresholds | None = None) -> None:
        self.db = Path(db)
        self.thresholds = thresholds
        self.where = str(self.db)
        self._notice = notice
        self._noticed = False

    def call(self, op: str, **args: Any) -> Any:
        return asyncio.run(self._call(op, {k: v for k, v in args.items() if v is not None}))

    def status_later(self, **args: Any) -> Callable[[], FleetView]:
        return one_status_later(self, args)

    async def _call(self, op: str, args: dict[str, Any]) -> Any:
        try:
            store = await Store.open(StorageConfig(path=str(self.db)), readonly=True)
        except StorageError as exc:
            raise CliError(f"cannot read history at {self.db}: {exc}") from None
        try:
            if not self._noticed:
                self._noticed = True
                if self._notice is not None:
                    last = max((s.ts for s in (await store.latest()).values()), default=None)
                    self._notice(
                        f"collector not running; showing stored data from {self.db} "
                        f"(last sample {fmt_ago(last)})"
                    )
            ops = StoreOps(store, thresholds=self.thresholds or DEFAULT_THRESHOLDS).table()
            response = await dispatch(ops, {"op": op, "args": args, "v": API_VERSION})
        finally:
            await store.close()
        if not response["ok"]:
            raise api_error(response)
        return plain(response["result"])  # the same JSON shapes the socket gives
