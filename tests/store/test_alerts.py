"""Alert state upsert/load and silences add/list/expire, persisted across reopen."""

from __future__ import annotations

from gpufleet.collector.model.records import AlertRecord, SilenceRecord
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store


def _alert(fp: str, state: str = "firing", **kw: object) -> AlertRecord:
    fields: dict[str, object] = {"labels": {"host": "h1", "gpu": "0", "user": "alice"},
                                 "annotations": {"summary": "idle"}, "started_at": 100.0, "updated_at": 100.0}
    fields.update(kw)
    return AlertRecord(fingerprint=fp, rule="wasted", severity="warning", state=state, **fields)


async def test_alerts_upsert_and_load(config: StorageConfig) -> None:
    s = await Store.open(config)
    await s.save_alerts([_alert("a", "pending"), _alert("b"), _alert("c", "resolved", resolved_at=150.0)])
    await s.save_alerts([])  # nothing to do
    # a later save of the same fingerprint replaces it
    await s.save_alerts([_alert("a", "firing", fired_at=130.0, last_notified_at=131.0, value=0.5),
                         _alert("b", "resolved", resolved_at=300.0, annotations={"resolved": "util back"})])
    await s.close()
    s = await Store.open(config)
    active = await s.load_alerts()
    everything = await s.load_alerts(active_only=False)
    recent = await s.load_alerts(active_only=False, since=200.0)
    await s.close()
    assert [(a.fingerprint, a.state, a.fired_at, a.value) for a in active] == [("a", "firing", 130.0, 0.5)]
    assert active[0].labels == {"host": "h1", "gpu": "0", "user": "alice"}
    assert active[0].last_notified_at == 131.0
    assert {a.fingerprint for a in everything} == {"a", "b", "c"}
    assert {a.fingerprint for a in recent} == {"a", "b"}  # c resolved before 200
    b = next(a for a in recent if a.fingerprint == "b")
    assert b.annotations == {"resolved": "util back"} and b.resolved_at == 300.0


async def test_silences_add_list_expire(store: Store) -> None:
    first = await store.add_silence(SilenceRecord(matchers={"user": "alice", "rule": "wasted"}, starts_at=0.0,
                                                  ends_at=1000.0, created_by="ops", comment="training run"))
    second = await store.add_silence(SilenceRecord(matchers={"host": "gpu-*"}, starts_at=0.0, ends_at=500.0,
                                                   created_at=1.0))
    assert second > first
    live = await store.list_silences(now=100.0)
    assert [(x.id, x.matchers, x.created_by, x.comment) for x in live] == [
        (first, {"user": "alice", "rule": "wasted"}, "ops", "training run"),
        (second, {"host": "gpu-*"}, "", "")]
    assert live[0].created_at > 0 and live[1].created_at == 1.0
    assert [x.id for x in await store.list_silences(now=600.0)] == [first]
    assert await store.expire_silence(first, 200.0) is True
    assert await store.expire_silence(first, 250.0) is False  # already over
    assert await store.expire_silence(999, 250.0) is False
    assert [x.id for x in await store.list_silences(now=210.0)] == [second]
    everything = await store.list_silences(include_expired=True, now=210.0)
    assert [(x.id, x.ends_at) for x in everything] == [(first, 200.0), (second, 500.0)]
