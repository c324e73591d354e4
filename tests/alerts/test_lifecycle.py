"""Alert lifecycle timing with a fake clock: pending for `for`, firing, resolved with a message, group_wait,
group_interval, repeat_interval, inhibition, silences, user notes, the storage alert."""

from __future__ import annotations

from gpufleet.collector.settings import Selector


async def test_pending_for_then_firing_then_resolved_with_message(harness, clock, w):
    h = harness()
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    wasted = w.snap(w.gpu(2, util=2, procs=[w.proc(4242)]))
    for i in range(0, 1800, 60):
        clock.t = t0 + i
        h.send(wasted)
        await h.tick()
    assert [a.state for a in h.engine.active()] == ["pending"]
    assert rec.got == []
    clock.t = t0 + 1800
    h.send(wasted)
    await h.tick()
    [alert] = h.engine.active()
    assert alert.state == "firing" and alert.fired_at == t0 + 1800
    assert rec.got == [], "group_wait holds the first send"
    await h.tick(t0 + 1829)
    assert rec.got == []
    await h.tick(t0 + 1830)
    [n] = rec.got
    assert n.status == "firing" and n.group_key == '{host="n3",rule="wasted"}'
    assert n.alerts[0].annotations["summary"] == (
        "alice's jupyter-lab (pid 4242) holds 40.0 GiB on n3 GPU 2 at 2 % util for 30m")
    assert h.engine.firing().anywhere("n3") == {"wasted"} and h.engine.firing().on("n3", 2) == {"wasted"}
    assert h.engine.firing().on("n3", 0) == set()
    # alice exits the notebook
    clock.t = t0 + 3000
    h.send(w.snap(w.gpu(2, util=0)))
    await h.tick()
    assert [a.rule for a in h.engine.active()] == ["idle"], "the free GPU is now pending idle"
    assert h.engine.firing().anywhere("n3") == set()
    last = rec.got[-1]
    assert last.status == "resolved"
    assert last.alerts[0].annotations["resolved"] == "alice released GPU 2 on n3 after 50m"


async def test_pending_that_clears_before_for_sends_nothing(harness, clock, w):
    h = harness()
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.send(w.snap(w.gpu(0, procs=[w.proc()])))
    await h.tick(t0 + 600)
    h.send(w.snap(w.gpu(0, util=80, procs=[w.proc()])))
    clock.t = t0 + 700
    h.send(w.snap(w.gpu(0, util=80, procs=[w.proc()])))
    await h.tick(t0 + 4000)
    assert h.engine.active() == [] and h.notifiers[0].got == []


async def test_repeat_interval_resends_unchanged_group(harness, clock, w):
    h = harness(w.config(rules={"overheating": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    hot = w.snap(w.gpu(0, temperature=90))
    h.send(hot)
    await h.tick(t0 + 30)
    assert len(rec.got) == 1
    for t in (600, 1800, 3629):
        clock.t = t0 + t
        h.send(hot)
        await h.tick()
    assert len(rec.got) == 1, "nothing new before repeat_interval"
    clock.t = t0 + 3630
    h.send(hot)
    await h.tick()
    assert len(rec.got) == 2
    assert rec.got[1].alerts[0].annotations["summary"] == "n3 GPU 0 at 90°C (threshold 85°C) for 1h00m"
    clock.t = t0 + 3700
    h.send(w.snap(w.gpu(0, temperature=71)))
    await h.tick()
    assert len(rec.got) == 2, "a resolution waits for group_interval after the last send"
    await h.tick(t0 + 3630 + 300)
    assert rec.got[2].status == "resolved"
    assert rec.got[2].alerts[0].annotations["resolved"] == "n3 GPU 0 back to 71°C"


async def test_group_wait_batches_and_group_interval_spaces_updates(harness, clock, w):
    h = harness(w.config(rules={"wasted": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.send(w.snap(w.gpu(1, procs=[w.proc(1)])))
    await h.tick()
    clock.t = t0 + 10
    h.send(w.snap(w.gpu(1, procs=[w.proc(1)]), w.gpu(2, procs=[w.proc(2, user="bob")])))
    h.send(w.snap(w.gpu(0, procs=[w.proc(3, user="carol")])), host="n4")
    await h.tick()
    assert rec.got == []
    await h.tick(t0 + 30)
    assert [n.group_key for n in rec.got] == ['{host="n3",rule="wasted"}'], "n4's group started 10 s later"
    await h.tick(t0 + 40)
    by_group = {n.group_key: n for n in rec.got}
    assert set(by_group) == {'{host="n3",rule="wasted"}', '{host="n4",rule="wasted"}'}
    assert sorted(a.labels["user"] for a in by_group['{host="n3",rule="wasted"}'].alerts) == ["alice", "bob"]
    sent = len(rec.got)
    # a third alert in the n3 group: held until group_interval after the last send
    clock.t = t0 + 100
    h.send(w.snap(w.gpu(1, procs=[w.proc(1)]), w.gpu(2, procs=[w.proc(2, user="bob")]),
                  w.gpu(3, procs=[w.proc(4, user="dave")])))
    await h.tick()
    await h.tick(t0 + 329)
    assert len(rec.got) == sent
    await h.tick(t0 + 330)
    [update] = rec.got[sent:]
    assert sorted(a.labels["user"] for a in update.alerts) == ["alice", "bob", "dave"]


NO_KEEP = {"keep_firing_for": 0.0}  # host_down resolves as soon as the host is back (default: kept 60 s)


async def test_host_down_inhibits_the_hosts_other_alerts(harness, clock, w):
    h = harness(w.config(rules={"overheating": {"for": 0.0}, "host_down": dict(NO_KEEP)}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    h.send(w.snap(w.gpu(0, temperature=95)))
    h.down(reason="ssh connection lost")
    await h.tick(t0 + 30)
    assert [[a.rule for a in n.alerts] for n in rec.got] == [["host_down"]]
    assert rec.got[0].alerts[0].annotations["summary"] == "n3 is down: ssh connection lost"
    assert {a.rule for a in h.engine.active()} == {"host_down", "overheating"}, "still tracked"
    assert h.engine.is_muted(next(a for a in h.engine.active() if a.rule == "overheating"))
    await h.tick(t0 + 90)
    assert len(rec.got) == 1
    clock.t = t0 + 100
    h.up()
    h.send(w.snap(w.gpu(0, temperature=95)))
    await h.tick()
    assert [a.rule for a in rec.got[-1].alerts] == ["overheating"]
    await h.tick(t0 + 330)
    resolved = rec.got[-1]
    assert resolved.status == "resolved" and resolved.alerts[0].rule == "host_down"
    assert resolved.alerts[0].annotations["resolved"].startswith("n3 is back up after")


async def test_host_back_with_a_new_key_is_news_and_still_inhibits(harness, clock, w):
    """The reinstall case: a host down for a while returns with another SSH key. That must be sent now
    (not folded into the alert already sent), and the host's other alerts stay muted."""
    h = harness(w.config(rules={"overheating": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    h.send(w.snap(w.gpu(0, temperature=95)))
    h.down(reason="connection refused")
    await h.tick(t0 + 30)
    assert [[a.rule for a in n.alerts] for n in rec.got] == [["host_down"]]
    clock.t = t0 + 600
    h.down(reason="host key changed: 127.0.0.1:22 offers SHA256:new; known_hosts:3 has another key")
    await h.tick()
    await h.tick(t0 + 640)
    news = [a for n in rec.got[1:] for a in n.alerts if a.state == "firing"]
    assert [a.labels.get("kind") for a in news] == ["host_key"]
    assert "host key changed" in news[0].annotations["summary"]
    gone = [a for n in rec.got[1:] for a in n.alerts if a.state == "resolved"]
    assert [a.labels.get("kind") for a in gone] == [None]
    assert gone[0].annotations["resolved"].startswith("n3: no longer 'connection refused'; now: host key")
    hot = next(a for a in h.engine.active() if a.rule == "overheating")
    assert h.engine.is_muted(hot), "a host we cannot read keeps its other alerts muted"


async def test_silent_agent_is_host_down_after_missed_intervals(harness, clock, w):
    h = harness(w.config(group_wait=0.0, rules={"host_down": dict(NO_KEEP)}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    h.send(w.snap(w.gpu(0)))
    h.mute_agent()
    await h.tick(t0 + 3)
    assert h.engine.active() == []
    await h.tick(t0 + 3.5)
    [n] = rec.got
    assert n.alerts[0].rule == "host_down" and "no frame for 3s" in n.alerts[0].annotations["summary"]
    clock.t = t0 + 4
    h.send(w.snap(w.gpu(0)))
    await h.tick()
    assert h.engine.active() == []


async def test_silence_mutes_then_expiry_resumes_without_resending(harness, clock, w):
    h = harness(w.config(rules={"overheating": {"for": 0.0}, "wasted": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    hot = w.gpu(0, temperature=90)
    h.send(w.snap(hot))
    await h.tick(t0 + 30)
    assert len(rec.got) == 1  # overheating sent before any silence
    s1 = await h.engine.add_silence({"host": "n3", "rule": "wasted"}, 7200, "training restarts", "admin")
    s2 = await h.engine.add_silence({"rule": "overheat*"}, 4000, "known", "admin")
    assert s1.id is not None and s2.id is not None and s1.ends_at == clock.t + 7200
    assert [s.id for s in await h.engine.list_silences()] == [s1.id, s2.id]
    clock.t = t0 + 60
    h.send(w.snap(hot, w.gpu(1, procs=[w.proc()])))
    await h.tick()
    await h.tick(t0 + 500)
    assert len(rec.got) == 1, "silenced: nothing sent"
    assert {a.rule: a.state for a in h.engine.active()} == {"overheating": "firing", "wasted": "firing"}
    assert await h.engine.expire_silence(s1.id)
    assert not await h.engine.expire_silence(s1.id), "already expired"
    assert [s.id for s in await h.engine.list_silences()] == [s2.id]
    assert len(await h.engine.list_silences(include_expired=True)) == 2
    await h.tick(t0 + 501)
    assert [[a.rule for a in n.alerts] for n in rec.got[1:]] == [["wasted"]], "the alert that fired meanwhile"
    # the overheating repeat (due t0+3630) falls inside its silence: suppressed
    for t in (1000, 3630, 4029):
        clock.t = t0 + t
        h.send(w.snap(hot, w.gpu(1, procs=[w.proc()])))
        await h.tick()
    assert len(rec.got) == 2
    # the silence ends: the repeat that fell due meanwhile goes out once, like Alertmanager's
    await h.tick(t0 + 4030)
    assert [a.rule for a in rec.got[-1].alerts] == ["overheating"] and len(rec.got) == 3
    await h.tick(t0 + 4100)
    assert len(rec.got) == 3


async def test_silence_expiry_before_the_repeat_sends_nothing_extra(harness, clock, w):
    h = harness(w.config(rules={"overheating": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.send(w.snap(w.gpu(0, temperature=90)))
    await h.tick(t0 + 30)
    silence = await h.engine.add_silence({"host": "n3"}, 3600)
    await h.tick(t0 + 600)
    assert silence.id is not None and await h.engine.expire_silence(silence.id)
    for t in (601, 1200, 3629):
        await h.tick(t0 + t)
    assert len(rec.got) == 1
    await h.tick(t0 + 3630)
    assert len(rec.got) == 2


async def test_silence_expires_by_time(harness, clock, w):
    h = harness(w.config(group_wait=0.0, rules={"overheating": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    await h.engine.add_silence({"host": "n3"}, 100)
    h.send(w.snap(w.gpu(0, temperature=90)))
    await h.tick(t0 + 99)
    assert rec.got == []
    await h.tick(t0 + 100)
    assert len(rec.got) == 1


async def test_selectors_restrict_what_counts(harness, clock, w):
    cfg = w.config(group_wait=0.0, rules={
        "wasted": {"for": 0.0, "select": Selector(tags=["prod"], exclude_users=["root"])}})
    h = harness(cfg)
    await h.engine.start(run_tick=False)
    h.up("n3")
    h.send(w.snap(w.gpu(0, procs=[w.proc(1, user="root"), w.proc(2, user="alice")])), host="n3")
    h.send(w.snap(w.gpu(0, uuid="GPU-n4-0", procs=[w.proc(3, user="bob")])), host="n4")  # not tagged prod
    await h.tick()
    wasted = [a for a in h.engine.active() if a.rule == "wasted"]  # (the GPU is full: near_oom is pending)
    assert [(a.labels["host"], a.labels["user"]) for a in wasted] == [("n3", "alice")]
