"""A destination that accepts nothing for ``alerting.notifier_down_after`` raises ``notifier_down`` through
the other destinations only, resolved when it delivers again; ``gpufleet alerts`` says which alerts are
undelivered where since when (issue 11). Real HTTP receivers on 127.0.0.1 (one answering 503), the real
webhook notifier and dispatcher; the engine's clock is faked, the retries run in real time."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

from gpufleet.cli.render_alerts import render_alerts
from gpufleet.collector.faces.api.ops import Args, LiveOps, encode
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.settings import AlertingConfig, NotifierConfig
from rich.console import Console

from tests.webhook import webhook


def rules_got(server) -> list[tuple[str, list[str], list[str]]]:
    """(status, alertnames, notifier labels) of each accepted POST."""
    out = []
    for _t, body in server.got:
        d = json.loads(body)
        out.append((d["status"], [a["labels"]["alertname"] for a in d["alerts"]],
                    [a["labels"].get("notifier", "") for a in d["alerts"]]))
    return out


async def until(check, what: str, wait: float = 20.0) -> None:
    deadline = time.monotonic() + wait
    while not check():
        assert time.monotonic() < deadline, f"not within {wait} s: {what}"
        await asyncio.sleep(0.02)


async def test_failing_destination_raises_notifier_down_through_the_others(harness, clock, w):
    with webhook() as bad, webhook() as good:
        bad.down_until = time.time() + 3600
        notifiers = build_notifiers(
            [NotifierConfig(name="bad", kind="webhook", urls=[bad.url], retries=0),
             NotifierConfig(name="good", kind="webhook", urls=[good.url], retries=0)], AlertingConfig())
        h = harness(w.config(rules={"overheating": {"for": 0.0}}, notifier_down_after=300.0),
                    notifiers=notifiers)
        await h.engine.start(run_tick=False)
        t0 = clock.t
        hot = w.snap(w.gpu(0, temperature=93))
        h.send(hot)
        await h.tick(t0 + 30)
        assert rules_got(good) == [("firing", ["overheating"], [""])]
        [overheating] = h.engine.active()
        assert h.engine.undelivered(overheating) == {"bad": t0 + 30}

        # what `gpufleet alerts` shows (the answer of the alerts op, rendered by the CLI)
        collector = SimpleNamespace(config=h.config, live=None, store=h.store, alerts=h.engine)
        answer = json.loads(encode(await LiveOps(collector, clock=clock).alerts(Args({}))))
        assert answer["undelivered"] == {overheating.fingerprint: {"bad": t0 + 30}}
        console = Console(width=160, record=True)
        console.print(render_alerts(answer, 160, t0 + 60, t0))
        shown = console.export_text()
        assert "overheating on n3: undelivered to bad since " in shown, shown

        for t in range(60, 330, 30):  # failing, but not yet for notifier_down_after
            h.send(hot)
            await h.tick(t0 + t)
        assert {a.rule for a in h.engine.active()} == {"overheating"}
        h.send(hot)
        await h.tick(t0 + 331)
        down = next(a for a in h.engine.active() if a.rule == "notifier_down")
        assert down.labels == {"notifier": "bad", "rule": "notifier_down"} and down.state == "firing"
        assert down.annotations["summary"].startswith("notifications to bad have failed for 5m")
        await h.tick(t0 + 361)  # group_wait
        await until(lambda: len(good.got) == 2, "notifier_down reaches the good destination")
        assert rules_got(good)[1] == ("firing", ["notifier_down"], ["bad"])

        bad.down_until = 0.0  # the bad one recovers: its overheating message goes through at last
        await until(lambda: bad.got and not h.dispatcher.failing(), "the retried overheating notification")
        h.send(hot)
        await h.tick(t0 + 400)
        assert [a.rule for a in h.engine.active()] == ["overheating"], "resolved once it delivers again"
        assert h.engine.undelivered(overheating) == {}
        await h.tick(t0 + 361 + 300)  # group_interval
        await until(lambda: len(good.got) == 3, "the resolution")
        await h.engine.stop(5.0)
    assert rules_got(good)[2] == ("resolved", ["notifier_down"], ["bad"])
    assert json.loads(good.got[2][1])["alerts"][0]["annotations"]["resolved"].startswith(
        "notifier bad accepts notifications again after")
    assert all("notifier_down" not in names for _s, names, _n in rules_got(bad)), rules_got(bad)
    assert rules_got(bad)[0] == ("firing", ["overheating"], [""])
