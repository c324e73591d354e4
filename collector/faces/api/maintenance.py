"""The query API's maintenance ops: ``maintenance_start`` / ``maintenance_stop`` (admins) and
``maintenance_list`` (readers), over :class:`gpufleet.collector.fleet.maintenance.Maintenance`.

``host`` is a name, a shell glob or a list of them, matched against the hosts this collector watches; a
name it does not watch is "unknown host", which the CLI takes as "another shard's" when it asks several.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.api.access import Access
from gpufleet.collector.fleet.maintenance import DEFAULT_WINDOW
from gpufleet.collector.model.views import MaintenanceRecord

if TYPE_CHECKING:
    from gpufleet.collector.faces.api.ops import Args, Handler
    from gpufleet.collector.fleet.maintenance import Maintenance

NEEDS_COLLECTOR = "maintenance needs the running collector (start it with `gpufleet collector run`)"


class MaintenanceOps:
    """The live ops; ``collector`` is the daemon (its ``maintenance``), whose absence is a clear error."""

    def __init__(self, collector: Any, access: Access) -> None:
        self.collector = collector
        self.access = access

    def _windows(self) -> Maintenance:
        windows: Maintenance | None = getattr(self.collector, "maintenance", None)
        if windows is None:
            raise QueryError(NEEDS_COLLECTOR)
        return windows

    async def start(self, a: Args) -> list[MaintenanceRecord]:
        self.access.check_admin(a.peer, "starting maintenance")
        duration = a.opt_float("duration", DEFAULT_WINDOW)
        assert duration is not None
        return await self._windows().begin(a.str_list("host"), duration, a.opt_str("comment", "") or "",
                                           who=a.peer.name)  # who really asked, never a client's claim

    async def stop(self, a: Args) -> list[MaintenanceRecord]:
        self.access.check_admin(a.peer, "ending maintenance")
        return await self._windows().end(a.str_list("host"), who=a.peer.name)

    async def listing(self, a: Args) -> list[MaintenanceRecord]:
        return await self._windows().listing(include_ended=a.flag("include_ended"))

    def table(self) -> dict[str, Handler]:
        return {"maintenance_start": self.start, "maintenance_stop": self.stop,
                "maintenance_list": self.listing}


def stored_table(store: Any) -> dict[str, Handler]:
    """The read-only fallback's ops (collector down): the windows from the file; changes need the
    collector."""

    async def listing(a: Args) -> list[MaintenanceRecord]:
        include_ended = a.flag("include_ended")
        rows: list[MaintenanceRecord] = await store.list_maintenance(include_ended=include_ended)
        return rows

    async def needs_collector(a: Args) -> Any:
        raise QueryError(NEEDS_COLLECTOR)

    return {"maintenance_start": needs_collector, "maintenance_stop": needs_collector,
            "maintenance_list": listing}
