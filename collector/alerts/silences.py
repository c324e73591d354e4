"""Muting: silences (label matchers for a while, persisted in the store, also written by the CLI while the
collector runs) and inhibition (a host that is down mutes its other alerts). A muted alert still changes
state; it is only left out of notifications.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from gpufleet.collector.alerts.fingerprint import fingerprint
from gpufleet.collector.errors import QueryError
from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.rules.base import matchers_match
from gpufleet.collector.rules.hosts import HOST_KEY
from gpufleet.collector.units import fmt_duration

log = logging.getLogger(__name__)

SILENCE_RELOAD = 30.0  # pick up silences written to the store by others (the CLI while we run)
#: the rule whose firing alert on a host mutes that host's other alerts
INHIBITING_RULE = "host_down"


class SilenceStore(Protocol):
    """The part of gpufleet.collector.store.Store silences use."""

    async def add_silence(self, silence: SilenceRecord) -> int: ...
    async def list_silences(self, *, include_expired: bool = False,
                            now: float | None = None) -> list[SilenceRecord]: ...
    async def expire_silence(self, silence_id: int, now: float) -> bool: ...


def inhibited(a: AlertRecord, alerts: Mapping[str, AlertRecord]) -> bool:
    """Is ``a`` about a host whose host_down (either kind) is firing?"""
    host = a.labels.get("host")
    if a.rule == INHIBITING_RULE or not host:
        return False
    down_labels = {"host": host, "rule": INHIBITING_RULE}
    for labels in (down_labels, {**down_labels, "kind": HOST_KEY}):
        down = alerts.get(fingerprint(labels))
        if down is not None and down.state == "firing":
            return True
    return False


class Silences:
    """The silences in force, kept in step with the store."""

    def __init__(self, store: SilenceStore | None, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self.current: list[SilenceRecord] = []
        self._loaded_at = 0.0
        self._local_ids = itertools.count(1)

    def loaded(self, silences: list[SilenceRecord], now: float) -> None:
        self.current, self._loaded_at = silences, now

    def silenced(self, labels: dict[str, str], now: float) -> bool:
        return any(s.starts_at <= now < s.ends_at and matchers_match(s.matchers, labels)
                   for s in self.current)

    async def reload(self, now: float) -> None:
        if self.store is None:
            self.current = [s for s in self.current if s.ends_at > now]
            return
        if now - self._loaded_at < SILENCE_RELOAD and now >= self._loaded_at:
            return
        try:
            self.current = await self.store.list_silences(include_expired=False, now=now)
        except Exception as exc:  # noqa: BLE001 - keep the ones we have
            log.warning("could not reload silences: %s", exc)
        self._loaded_at = now

    async def add(self, matchers: dict[str, str], duration: float, comment: str = "",
                  created_by: str = "") -> SilenceRecord:
        """Mute alerts whose labels match every matcher (exact or glob) for ``duration`` seconds."""
        if not matchers or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                   for k, v in matchers.items()):
            raise QueryError("a silence needs at least one matcher like host=n3 or rule=wasted")
        if duration <= 0:
            raise QueryError(f"silence duration must be positive, got {duration:g} s")
        now = self.clock()
        silence = SilenceRecord(matchers=dict(matchers), starts_at=now, ends_at=now + duration,
                                created_by=created_by, comment=comment, created_at=now)
        if self.store is not None:
            silence.id = await self.store.add_silence(silence)
        else:
            silence.id = next(self._local_ids)
        self.current.append(silence)
        log.info("silence %s added by %s for %s: %s", silence.id, created_by or "?", fmt_duration(duration),
                 matchers)
        return silence

    async def listing(self, include_expired: bool = False) -> list[SilenceRecord]:
        now = self.clock()
        if include_expired and self.store is not None:
            return await self.store.list_silences(include_expired=True, now=now)
        return [s for s in self.current if include_expired or s.ends_at > now]

    async def expire(self, silence_id: int) -> bool:
        now = self.clock()
        found = False
        for s in self.current:
            if s.id == silence_id and s.ends_at > now:
                s.ends_at = now
                found = True
        if self.store is not None:
            found = await self.store.expire_silence(silence_id, now) or found
        return found
