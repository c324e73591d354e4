"""State survives an engine restart: nothing is re-sent early, nothing is forgotten."""

from __future__ import annotations

import asyncio

from gpufleet.agent import wire
from gpufleet.collector.model.records import AlertRecord


async def test_restart_does_not_resend_a_notified_alert(harness, clock, store, w):
    cfg = w.config(rules={"overheating": {"for": 0.0}})
    h1 = harness(cfg)
    await h1.engine.start(run_tick=False)
    t0 = clock.t
    h1.send(w.snap(w.gpu(0, temperature=90)))
    await h1.tick(t0 + 30)
    assert len(h1.notifiers[0].got) == 1
    await h1.engine.stop()
    [saved] = store.alerts.values()
    assert saved.state == "firing" and saved.last_notified_at == t0 + 30

    h2 = harness(cfg)
    rec2 = h2.notifiers[0]
    clock.t = t0 + 100
    await h2.engine.start(run_tick=False)
    assert [a.rule for a in h2.engine.active()] == ["overheating"], "remembered before any snapshot"
    assert h2.engine.firing().on("n3", 0) == {"overheating"}
    await h2.tick()
    for t in (200, 1800, 3629):
        clock.t = t0 + t
        h2.send(w.snap(w.gpu(0, temperature=90)))
        await h2.tick()
    assert rec2.got == [], "no re-send until repeat_interval after the last notification"
    clock.t = t0 + 3630
    h2.send(w.snap(w.gpu(0, temperature=90)))
    await h2.tick()
    assert len(rec2.got) == 1 and rec2.got[0].status == "firing"
    assert rec2.got[0].alerts[0].started_at == t0, "same alert instance, not a new one"


async def test_restart_keeps_pending_timer(harness, clock, store, w):
    cfg = w.config()
    h1 = harness(cfg)
    await h1.engine.start(run_tick=False)
    t0 = clock.t
    h1.send(w.snap(w.gpu(0, procs=[w.proc()])))
    await h1.tick(t0 + 1000)
    h1.send(w.snap(w.gpu(0, procs=[w.proc()])))
    await h1.engine.stop()

    h2 = harness(cfg)
    clock.t = t0 + 1200
    await h2.engine.start(run_tick=False)
    h2.send(w.snap(w.gpu(0, procs=[w.proc()])))
    await h2.tick()
    assert [a.state for a in h2.engine.active()] == ["pending"]
    clock.t = t0 + 1800
    h2.send(w.snap(w.gpu(0, procs=[w.proc()])))
    await h2.tick()
    [a] = h2.engine.active()
    assert a.state == "firing" and a.started_at == t0, "`for` counted from before the restart"


async def test_restart_then_resolution_is_notified_once(harness, clock, store, w):
    cfg = w.config(rules={"overheating": {"for": 0.0}})
    h1 = harness(cfg)
    await h1.engine.start(run_tick=False)
    t0 = clock.t
    h1.send(w.snap(w.gpu(0, temperature=90)))
    await h1.tick(t0 + 30)
    await h1.engine.stop()
    h2 = harness(cfg)
    clock.t = t0 + 400
    await h2.engine.start(run_tick=False)
    h2.send(w.snap(w.gpu(0, temperature=60)))
    await h2.tick()
    [n] = h2.notifiers[0].got
    assert n.status == "resolved" and n.alerts[0].annotations["resolved"] == "n3 GPU 0 back to 60°C"
    await h2.tick(t0 + 5000)
    assert len(h2.notifiers[0].got) == 1
    assert store.alerts[n.alerts[0].fingerprint].state == "resolved"


async def test_xid_hold_survives_restart(harness, clock, store, w):
    cfg = w.config(group_wait=0.0, rules={"xid": {"hold": 600.0}})
    h1 = harness(cfg)
    await h1.engine.start(run_tick=False)
    t0 = clock.t
    h1.send(w.snap(w.gpu(1)))
    h1.event(wire.Event(ts=t0, kind="xid", xid=79, gpu_index=1, message="fell off the bus"))
    await h1.tick()
    [n] = h1.notifiers[0].got
    assert n.alerts[0].severity == "critical" and n.alerts[0].labels["uuid"] == "GPU-0001"
    await h1.engine.stop()
    h2 = harness(cfg)
    clock.t = t0 + 300
    await h2.engine.start(run_tick=False)
    await h2.tick()
    assert [a.rule for a in h2.engine.active()] == ["xid"], "still held after the restart"
    await h2.tick(t0 + 599)
    assert h2.engine.active()
    await h2.tick(t0 + 600)
    assert h2.engine.active() == []
    [resolved] = h2.notifiers[0].got
    assert resolved.alerts[0].annotations["resolved"] == "n3 GPU 1: no Xid 79 for 10m"


async def test_store_failure_keeps_changes_for_the_next_save(harness, clock, store, w):
    h = harness(w.config(rules={"overheating": {"for": 0.0}}))
    await h.engine.start(run_tick=False)
    store.fail = True
    h.send(w.snap(w.gpu(0, temperature=90)))
    await h.tick()
    assert store.alerts == {} and h.engine.stats["save_errors"] == 1
    store.fail = False
    await h.tick()
    assert [a.state for a in store.alerts.values()] == ["firing"]


async def test_silences_are_loaded_from_the_store(harness, clock, store, w):
    h1 = harness()
    await h1.engine.start(run_tick=False)
    s = await h1.engine.add_silence({"host": "n3"}, 3600, "maintenance", "ops")
    await h1.engine.stop()
    h2 = harness(w.config(group_wait=0.0, rules={"overheating": {"for": 0.0}}))
    await h2.engine.start(run_tick=False)
    assert [x.id for x in await h2.engine.list_silences()] == [s.id]
    h2.send(w.snap(w.gpu(0, temperature=90)))
    await h2.tick()
    assert h2.notifiers[0].got == []


async def test_a_save_cut_short_by_stop_is_saved_by_stop(harness, clock, store, w, monkeypatch):
    """stop() cancels the tick; if that lands inside the tick's save, the batch must not be lost (here: a
    pending alert that resolved and was dropped from memory in that same tick)."""
    h = harness(w.config(rules={"overheating": {"for": 600.0}}))
    await h.engine.start(run_tick=False)
    h.send(w.snap(w.gpu(0, temperature=90)))
    await h.tick()
    [fp] = store.alerts
    h.send(w.snap(w.gpu(0, temperature=40)))
    entered, save = asyncio.Event(), store.save_alerts

    async def stuck(alerts: list[AlertRecord]) -> None:
        entered.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(store, "save_alerts", stuck)
    tick = asyncio.create_task(h.engine.evaluate())
    await asyncio.wait_for(entered.wait(), 5)
    tick.cancel()  # what stop() does to its own tick task
    await asyncio.gather(tick, return_exceptions=True)
    monkeypatch.setattr(store, "save_alerts", save)
    await h.engine.stop()
    assert store.alerts[fp].state == "resolved"
