"""The notification log, like Alertmanager's nflog: per (alert group, destination), the newest state not yet
accepted there, what was accepted last and when, and since when the destination has been refusing.

An entry's ``pending`` is replaced by every newer state of its group (so the newest is what gets sent), and
cleared when the destination accepts it (2xx, exit 0). Entries persist as JSON rows in the store
(collector/store/nflog.py), so a restart goes on retrying what was not delivered.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Protocol

from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.store.nflog import NflogRecord

#: delivered entries are kept this long (for "what was sent when"), then pruned
KEEP_DELIVERED = 7 * 86400.0


class NflogStore(Protocol):
    """The part of gpufleet.collector.store.Store the log uses."""

    async def save_nflog(self, rows: list[NflogRecord], *, prune_before: float | None = None) -> None: ...
    async def load_nflog(self, *, since: float) -> list[NflogRecord]: ...


@dataclass(slots=True)
class Entry:
    group_key: str
    notifier: str
    pending: Notification | None = None  # newest state not yet accepted
    attempts: int = 0  # failed attempts of the pending state (backoff exponent)
    due: float = 0.0  # event-loop time of the next attempt
    failing_since: float | None = None  # wall time of the first failure not followed by a delivery
    last_error: str | None = None
    delivered_at: float | None = None
    delivered: dict[str, Any] | None = None  # summary of what was accepted last
    in_flight: Notification | None = None
    updated_at: float = 0.0


def summary(n: Notification) -> dict[str, Any]:
    """What an accepted notification said, compactly: enough to tell "unchanged" from "news"."""
    return {"kind": n.kind, "status": n.status, "created_at": n.created_at,
            "firing": sorted(a.fingerprint for a in n.alerts if a.state == "firing"),
            "resolved": sorted(a.fingerprint for a in n.alerts if a.state != "firing")}


def is_news(delivered: dict[str, Any] | None, n: Notification) -> bool:
    """Does ``n`` tell a destination that last accepted ``delivered`` anything new? Alertmanager's
    needsUpdate: new firing alerts; everything resolved after something firing; newly resolved alerts; or
    the same set again once ``n.repeat_interval`` has passed since the accepted one was made."""
    if n.repeat_interval is None:
        return True
    firing = {a.fingerprint for a in n.alerts if a.state == "firing"}
    if delivered is None or delivered.get("kind") != n.kind:
        return bool(firing)  # nothing of this group accepted there: only firing alerts are news
    was_firing, was_resolved = set(delivered.get("firing", ())), set(delivered.get("resolved", ()))
    if not firing <= was_firing:
        return True
    if not firing:
        return bool(was_firing)  # resolved alerts the destination never saw firing are no news
    if not {a.fingerprint for a in n.alerts if a.state != "firing"} <= was_resolved:
        return True
    return n.created_at - float(delivered.get("created_at") or 0.0) >= n.repeat_interval


def encode(n: Notification) -> str:
    d = dataclasses.asdict(n)
    d["targets"] = sorted(n.targets) if n.targets is not None else None
    d["exclude"] = sorted(n.exclude)
    return json.dumps(d, separators=(",", ":"), sort_keys=True)


def decode(text: str) -> Notification:
    d = json.loads(text)
    d["alerts"] = [AlertRecord(**a) for a in d.get("alerts", [])]
    d["targets"] = frozenset(d["targets"]) if d.get("targets") is not None else None
    d["exclude"] = frozenset(d.get("exclude", []))
    d.pop("id", None)  # a fresh id in this process
    return Notification(**d)


def to_record(e: Entry) -> NflogRecord:
    return NflogRecord(group_key=e.group_key, notifier=e.notifier,
                       pending=encode(e.pending) if e.pending is not None else None, attempts=e.attempts,
                       failing_since=e.failing_since, last_error=e.last_error, delivered_at=e.delivered_at,
                       delivered=json.dumps(e.delivered) if e.delivered is not None else None,
                       updated_at=e.updated_at)


def from_record(r: NflogRecord, due: float) -> Entry:
    return Entry(group_key=r.group_key, notifier=r.notifier,
                 pending=decode(r.pending) if r.pending is not None else None, attempts=r.attempts,
                 due=due, failing_since=r.failing_since, last_error=r.last_error,
                 delivered_at=r.delivered_at, delivered=json.loads(r.delivered) if r.delivered else None,
                 updated_at=r.updated_at)
