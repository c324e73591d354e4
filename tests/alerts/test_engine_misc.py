"""User notes, the storage alert, per-event rules through the engine, the tick task, stats."""

from __future__ import annotations

import asyncio

from gpufleet.agent import wire


async def test_user_is_noted_once_per_repeat_interval(harness, clock, w):
    cfg = w.config(rules={"wasted": {"for": 0.0}}, notify_users=True, user_email_domain="example.org",
                   user_emails={"bob": "bob@lab.example.org"})
    team, users = w.recorder("team"), w.recorder("users", targeted=True)
    h = harness(cfg, notifiers=[team, users])
    await h.engine.start(run_tick=False)
    t0 = clock.t
    both = w.snap(w.gpu(1, procs=[w.proc(1)]), w.gpu(2, procs=[w.proc(2)]),
                  w.gpu(3, procs=[w.proc(3, "bob")]))
    h.send(both)
    await h.tick(t0 + 30)
    assert all(n.kind == "alert" for n in team.got), "the team channel never gets user notes"
    notes = {n.recipient: n for n in users.got}
    assert set(notes) == {"alice@example.org", "bob@lab.example.org"}
    assert len(notes["alice@example.org"].alerts) == 2, "one note listing both of alice's GPUs"
    assert notes["alice@example.org"].title == "gpufleet: your GPU on n3 is holding memory but idle"
    assert all(n.kind == "user" for n in users.got)
    for t in (600, 3000, 3629):
        clock.t = t0 + t
        h.send(both)
        await h.tick()
    assert len(users.got) == 2, "at most one note per user per rule per repeat_interval"
    clock.t = t0 + 3630
    h.send(both)
    await h.tick()
    assert len(users.got) == 4


async def test_user_note_throttle_survives_restart(harness, clock, store, w):
    cfg = w.config(group_wait=0.0, rules={"wasted": {"for": 0.0}}, notify_users=True,
                   user_email_domain="example.org")
    users = w.recorder("users", targeted=True)
    h1 = harness(cfg, notifiers=[users])
    await h1.engine.start(run_tick=False)
    t0 = clock.t
    h1.send(w.snap(w.gpu(1, procs=[w.proc(1)])))
    await h1.tick()
    assert len(users.got) == 1
    await h1.engine.stop()
    assert "user_notified_at" not in users.got[0].alerts[0].annotations, "bookkeeping stays inside"
    assert all("user_notified_at" in a.annotations for a in store.alerts.values() if a.rule == "wasted")
    users2 = w.recorder("users", targeted=True)
    h2 = harness(cfg, notifiers=[users2])
    clock.t = t0 + 100
    await h2.engine.start(run_tick=False)
    h2.send(w.snap(w.gpu(1, procs=[w.proc(1)])))
    await h2.tick()
    assert users2.got == []


async def test_storage_alert(harness, clock, w):
    h = harness(w.config(group_wait=0.0))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    h.engine.storage_health(False, "database or disk is full")
    await h.tick()
    [n] = rec.got
    assert n.alerts[0].rule == "storage" and n.alerts[0].severity == "critical"
    assert "database or disk is full" in n.alerts[0].annotations["summary"]
    h.engine.storage_health(True, None)
    await h.tick(clock.t + 300)
    assert rec.got[-1].status == "resolved"


async def test_gpu_lost_event_fires_immediately(harness, clock, w):
    h = harness(w.config(group_wait=0.0))
    await h.engine.start(run_tick=False)
    h.engine.frame("n3", wire.Hello(agent_version="1", hostname="n3", ts=0.0,
                                    gpus=[wire.GpuInfo(index=0, uuid="GPU-0000")]), clock.t)
    h.event(wire.Event(ts=clock.t, kind="gpu_lost", gpu_index=0, message="GPU is lost"))
    await h.tick()
    assert h.engine.firing().on("n3", 0) == {"gpu_lost"}
    h.send(w.snap(w.gpu(0)))
    await h.tick()
    assert h.engine.firing().anywhere("n3") == set()


async def test_disabled_rule_produces_nothing(harness, clock, w):
    h = harness(w.config(group_wait=0.0, rules={"overheating": {"enabled": False}}))
    await h.engine.start(run_tick=False)
    h.send(w.snap(w.gpu(0, temperature=99)))
    await h.tick()
    assert "overheating" not in h.engine.rules and h.engine.active() == []


async def test_tick_task_runs_and_stop_persists(harness, clock, store, w):
    h = harness(w.config(group_wait=0.0, rules={"overheating": {"for": 0.0}}))
    await h.engine.start()
    h.send(w.snap(w.gpu(0, temperature=90)))
    for _ in range(40):
        if h.notifiers[0].got:
            break
        await asyncio.sleep(0.1)
    assert h.notifiers[0].got, "the background tick sent it"
    await h.engine.stop()
    assert [a.state for a in store.alerts.values()] == ["firing"]
    stats = h.engine.stats
    assert stats["sent"] == 1 and stats["dropped"] == 0 and stats["alerts_fired"] == 1
    assert h.engine.queue_depth == 0


async def test_engine_without_store_or_dispatcher(clock, w):
    from gpufleet.collector.alerts.engine import AlertEngine

    engine = AlertEngine(w.config(group_wait=0.0, rules={"overheating": {"for": 0.0}}), None, clock=clock)
    await engine.start(run_tick=False)
    engine.frame("n3", w.snap(w.gpu(0, temperature=90)), clock.t)
    await engine.evaluate()
    s = await engine.add_silence({"host": "n3"}, 60)
    assert s.id == 1 and await engine.expire_silence(1)
    assert engine.firing().anywhere("n3") == {"overheating"} and engine.queue_depth == 0
    await engine.stop()


async def test_bad_silence_is_refused(harness):
    import pytest
    from gpufleet.collector.errors import QueryError

    h = harness()
    with pytest.raises(QueryError):
        await h.engine.add_silence({}, 60)
    with pytest.raises(QueryError):
        await h.engine.add_silence({"host": "n3"}, 0)


def _cli_matchers(command: str) -> dict[str, str]:
    """The matchers `gpufleet silence add` builds from --host/--gpu/--user/--rule (cli/main.py)."""
    words = command.split()
    assert words[:3] == ["gpufleet", "silence", "add"]
    flags = dict(zip(words[3::2], words[4::2], strict=False))
    return {k: flags[f"--{k}"] for k in ("host", "gpu", "user", "rule") if f"--{k}" in flags}


async def test_keep_command_in_the_notification_mutes_only_that_user(harness, clock, w):
    """Two users idle on one shared GPU: the command the notification prints keeps alice's, not bob's."""
    h = harness(w.config(group_wait=0.0, group_interval=60.0, repeat_interval=600.0,
                         rules={"wasted": {"for": 0.0}}))
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    h.up()
    shared = w.snap(w.gpu(1, util=0, procs=[w.proc(10, "alice"), w.proc(11, "bob")]))
    h.send(shared)
    await h.tick()
    [n] = rec.got
    from gpufleet.collector.notify.message import body

    text = body(n)
    keep_alice = next(line.strip() for line in text.splitlines() if "--user alice" in line)
    assert keep_alice == ("gpufleet silence add --host n3 --gpu 1 --user alice --rule wasted --for 2h "
                          "--comment keep")
    assert "--user bob" in text
    await h.engine.add_silence(_cli_matchers(keep_alice), 7200, comment="keep")
    h.send(shared)
    await h.tick(clock.t + 601)  # the repeat is due: only bob's alert is re-sent
    wasted = [n for n in rec.got if n.group_labels.get("rule") == "wasted"]  # (the GPU is full: near_oom too)
    assert [a.labels["user"] for a in wasted[-1].alerts] == ["bob"]
    muted = {a.labels["user"]: h.engine.is_muted(a) for a in h.engine.active() if a.rule == "wasted"}
    assert muted == {"alice": True, "bob": False}


async def test_underused_notes_each_process_once_a_day(harness, clock, w):
    """underused is addressed to the user, at most once per process (pid + start time) per note_once_per,
    even when its alert resolves and fires again, and whatever repeat_interval says."""
    cfg = w.config(group_wait=0.0, repeat_interval=60.0, notify_users=True, user_email_domain="example.org",
                   rules={"underused": {"window": 10.0, "for": 0.0}})
    users = w.recorder("users", targeted=True)
    h = harness(cfg, notifiers=[users])
    await h.engine.start(run_tick=False)

    async def run_for(seconds: int, start_time: float = 500.0) -> None:
        for _ in range(seconds):
            clock.t += 1
            h.send(w.snap(w.gpu(0, util=20, procs=[w.proc(7, mem_gib=8, start_time=start_time)])))
            await h.tick()

    def notes() -> list[str]:
        return [a.labels.get("pid", "") + "@" + a.annotations.get("process_start", "")
                for n in users.got for a in n.alerts]

    await run_for(15)
    assert notes() == ["7@500"]
    assert users.got[0].recipient == "alice@example.org" and "underused" in users.got[0].title
    clock.t += 3600  # a gap: the alert resolves, and fires again when the window is full again
    await run_for(15)
    assert any(a.rule == "underused" and a.state == "firing" for a in h.engine.active())
    assert notes() == ["7@500"], "the same process is not noted again within a day"
    await run_for(15, start_time=900.0)  # pid 7 reused by a new process: its own note
    assert notes() == ["7@500", "7@900"]
    clock.t += 86400
    await run_for(15, start_time=900.0)
    assert notes() == ["7@500", "7@900", "7@900"], "a day later, once more"
