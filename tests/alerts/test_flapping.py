"""A flapping host is one page (issue 11.4): host_down fired, cleared within group_interval and fired again
was sent twice as "firing", with no resolved in between. Now ``keep_firing_for`` (Prometheus 2.42; 60 s for
host_down by default) keeps it one alert, and a group state a destination already accepted is not re-sent
before repeat_interval (Alertmanager's dedup). Fake clock; the last test delivers to a real HTTP receiver."""

from __future__ import annotations

import json

from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.settings import AlertingConfig, NotifierConfig

from tests.webhook import webhook

NO_KEEP = {"keep_firing_for": 0.0}


def statuses(rec) -> list[list[tuple[str, str]]]:
    return rec.alerts()


async def flap(h, clock, t0: float, *, back: float, down_again: float, until: float) -> None:
    """Down at t0, sent at t0 + group_wait, up at t0 + back, down again at t0 + down_again, ticks to until."""
    h.up()
    h.down(reason="connection lost")
    await h.tick(t0 + 30)
    clock.t = t0 + back
    h.up()
    await h.tick()
    for t in range(int(back) + 5, int(down_again), 5):
        await h.tick(t0 + t)
    clock.t = t0 + down_again
    h.down(reason="connection lost")
    for t in range(int(down_again) + 1, int(until), 5):
        await h.tick(t0 + t)


async def test_flap_within_keep_firing_for_is_one_alert_and_one_page(harness, clock, w):
    h = harness()  # host_down's default keep_firing_for: 60 s
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    await flap(h, clock, t0, back=40, down_again=55, until=700)
    assert statuses(rec) == [[("n3/host_down", "firing")]], "one page for the flap"
    [alert] = h.engine.active()
    assert alert.state == "firing" and alert.started_at == t0, "the same alert, never resolved"
    # back for good: it stays firing for keep_firing_for, then resolves and the resolve is sent
    clock.t = t0 + 700
    h.up()
    await h.tick()
    await h.tick(t0 + 759)
    assert [a.state for a in h.engine.active()] == ["firing"]
    await h.tick(t0 + 760)
    assert h.engine.active() == []
    assert statuses(rec) == [[("n3/host_down", "firing")], [("n3/host_down", "resolved")]]
    assert rec.got[-1].alerts[0].annotations["resolved"].startswith("n3 is back up after")


async def test_refire_within_group_interval_is_not_resent(harness, clock, w):
    """Without keep_firing_for the flap makes a new alert of the same identity; the group's firing set is
    what the receiver already has, so nothing is sent until repeat_interval."""
    h = harness(w.config(rules={"host_down": dict(NO_KEEP)}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    await flap(h, clock, t0, back=40, down_again=55, until=900)
    assert statuses(rec) == [[("n3/host_down", "firing")]]
    await h.tick(t0 + 4000)  # repeat_interval after the group's last flush (t0 + 331, news to nobody)
    assert statuses(rec) == [[("n3/host_down", "firing")]] * 2, "the repeat still comes"


async def test_clear_past_group_interval_sends_resolved_then_firing(harness, clock, w):
    h = harness(w.config(rules={"host_down": dict(NO_KEEP)}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    await flap(h, clock, t0, back=40, down_again=400, until=500)
    assert statuses(rec) == [[("n3/host_down", "firing")], [("n3/host_down", "resolved")],
                             [("n3/host_down", "firing")]]


async def test_flapping_host_pages_a_real_receiver_once(harness, clock, w):
    """The engine, the dispatcher and the webhook notifier as the collector builds them, a real receiver."""
    with webhook() as server:
        cfg = NotifierConfig(name="hook", kind="webhook", urls=[server.url], retries=0)
        h = harness(notifiers=build_notifiers([cfg], AlertingConfig()))
        await h.engine.start(run_tick=False)
        t0 = clock.t
        h.up()
        h.down(reason="connection lost")
        await h.tick(t0 + 30)
        for back, again in ((40, 55), (100, 110), (200, 250), (400, 420)):
            clock.t = t0 + back
            h.up()
            await h.tick()
            clock.t = t0 + again
            h.down(reason="connection lost")
            await h.tick()
        for t in range(430, 800, 10):
            await h.tick(t0 + t)
        clock.t = t0 + 800  # back for good
        h.up()
        for t in range(800, 900, 10):
            await h.tick(t0 + t)
        await h.engine.stop(5.0)
    got = [json.loads(body) for _t, body in server.got]
    assert [(g["status"], [a["labels"]["alertname"] for a in g["alerts"]]) for g in got] == [
        ("firing", ["host_down"]), ("resolved", ["host_down"])], "one page for a host that flapped four times"


def test_keep_firing_for_is_configurable_per_rule():
    from gpufleet.collector.config import parse_config

    cfg = parse_config("rules:\n  overheating:\n    keep_firing_for: 5m\n"
                       "  host_down:\n    keep_firing_for: 0\n")
    assert cfg.rules["overheating"].keep_firing_for == 300.0
    assert cfg.rules["host_down"].keep_firing_for == 0.0
    assert parse_config("{}").rules["host_down"].keep_firing_for == 60.0, "the default damps a flap"
    assert parse_config("{}").rules["wasted"].keep_firing_for == 0.0


async def test_keep_firing_for_on_a_snapshot_rule_resolves_on_the_tick(harness, clock, w):
    """A rule evaluated on snapshots: the kept alert resolves when keep_firing_for ends even if no snapshot
    comes then, with the message of the moment it cleared."""
    h = harness(w.config(group_wait=0.0, group_interval=10.0,
                         rules={"overheating": {"for": 0.0, "keep_firing_for": 120.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.send(w.snap(w.gpu(0, temperature=90)))
    await h.tick()
    clock.t = t0 + 50
    h.send(w.snap(w.gpu(0, temperature=71)))
    await h.tick(t0 + 169)
    assert [a.state for a in h.engine.active()] == ["firing"]
    await h.tick(t0 + 170)
    assert h.engine.active() == []
    assert [n.status for n in rec.got] == ["firing", "resolved"]
    assert rec.got[-1].alerts[0].annotations["resolved"] == "n3 GPU 0 back to 71°C"
