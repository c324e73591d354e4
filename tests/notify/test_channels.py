"""Command notifier, apprise (custom schema), the user mailer, the dispatcher's queue and filters."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.alerts.notes import keep_annotations
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.secrets import redact_url
from gpufleet.collector.settings import AlertingConfig, NotifierConfig

SCRIPT = """
import json, os, sys, time
out, mode = sys.argv[1], sys.argv[2]
data = json.load(sys.stdin)
with open(out, "a") as f:
    f.write(json.dumps({"title": os.environ["GPUFLEET_TITLE"], "status": os.environ["GPUFLEET_STATUS"],
                        "groupKey": data["groupKey"], "alerts": len(data["alerts"])}) + "\\n")
if mode == "fail-once" and sum(1 for _ in open(out)) == 1:
    print("transient failure", file=sys.stderr); sys.exit(3)
if mode == "fail":
    sys.exit(2)
if mode == "sleep":
    time.sleep(5)
"""


def command_notifier(w: Any, tmp_path: Path, mode: str, **kw: Any) -> tuple[NotificationDispatcher, Path]:
    script = tmp_path / "hook.py"
    script.write_text(SCRIPT)
    out = tmp_path / "calls.jsonl"
    cfg = w.config("cmd", "command", command=[sys.executable, str(script), str(out), mode], **kw)
    return NotificationDispatcher(build_notifiers([cfg], AlertingConfig()), backoff=0.01), out


async def test_command_gets_json_on_stdin(w, tmp_path):
    disp, out = command_notifier(w, tmp_path, "ok")
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(10)
    await disp.stop()
    [call] = [json.loads(line) for line in out.read_text().splitlines()]
    assert call == {"title": "[FIRING:1] warning: wasted on n3 GPU 2", "status": "firing",
                    "groupKey": '{host="n3",rule="wasted"}', "alerts": 1}
    assert disp.stats["sent"] == 1


async def test_command_nonzero_exit_is_retried(w, tmp_path):
    disp, out = command_notifier(w, tmp_path, "fail-once", retries=2)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(10)
    await disp.stop()
    assert len(out.read_text().splitlines()) == 2
    assert disp.stats == {**disp.stats, "sent": 1, "retries": 1, "failed": 0}


async def test_command_failure_and_timeout(w, tmp_path):
    disp, _ = command_notifier(w, tmp_path, "fail", retries=0)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(10)
    await disp.stop()
    assert disp.stats["failed"] == 1 and "exited 2" in disp.last_error["cmd"]
    disp2, _ = command_notifier(w, tmp_path, "sleep", retries=0, timeout=0.3)
    await disp2.start()
    disp2.submit(w.notification())
    assert await disp2.join(10)
    await disp2.stop()
    assert "timed out" in disp2.last_error["cmd"]


async def test_command_timeout_kills_the_programs_children_too(w, tmp_path):
    """A hook script whose child hangs (curl to a dead host) holds the stderr pipe; killing only the script
    would leave the child running and the send waiting for the pipe to close."""
    pidfile = tmp_path / "child.pid"
    cfg = w.config("cmd", "command", timeout=0.3, retries=0,
                   command=["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    [notifier] = build_notifiers([cfg], AlertingConfig())
    with pytest.raises(DeliveryError, match="timed out"):
        await asyncio.wait_for(notifier.send(w.notification()), 10)
    await _gone(int(pidfile.read_text()))


async def test_stopping_the_dispatcher_kills_a_running_command(w, tmp_path):
    pidfile = tmp_path / "child.pid"
    cfg = w.config("cmd", "command", timeout=60, retries=0,
                   command=["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    disp = NotificationDispatcher(build_notifiers([cfg], AlertingConfig()))
    await disp.start()
    disp.submit(w.notification())
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    await disp.stop(timeout=0.1)
    await _gone(int(pidfile.read_text()))


async def _gone(pid: int) -> None:
    """Wait until ``pid`` has exited (a zombie counts: killed, waiting for init to reap it)."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the hook's child {pid} still runs")


async def test_command_missing_program_is_final(w):
    cfg = w.config("cmd", "command", command=["/nonexistent/notify-me"], retries=3)
    disp = NotificationDispatcher(build_notifiers([cfg], AlertingConfig()), backoff=0.01)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    await disp.stop()
    assert disp.stats["failed"] == 1 and disp.stats["retries"] == 0


# ------------------------------------------------------------------------------------------- apprise

CALLS: list[dict[str, Any]] = []
FAIL: list[bool] = []


@pytest.fixture(scope="module")
def apprise_schema() -> list[dict[str, Any]]:
    apprise = pytest.importorskip("apprise")

    @apprise.decorators.notify(on="gpufleettest")
    def capture(body: str, title: str, notify_type: str, meta: dict[str, Any], *args: Any,
                **kwargs: Any) -> bool:
        CALLS.append({"body": body, "title": title, "type": str(notify_type), "meta": meta})
        return not FAIL

    return CALLS


async def test_apprise_custom_schema(w, apprise_schema):
    apprise_schema.clear()
    [notifier] = build_notifiers([w.config("chat", "apprise", urls=["gpufleettest://team/channel"])],
                                 AlertingConfig())
    assert notifier.describe() == "chat (apprise gpufleettest://***)"
    disp = NotificationDispatcher([notifier], backoff=0.01)
    await disp.start()
    disp.submit(w.notification(w.alert("overheating", severity="critical")))
    assert await disp.join(10)
    await disp.stop()
    [call] = apprise_schema
    assert call["title"] == "[FIRING:1] critical: wasted on n3 GPU 2"
    assert call["body"] == "* overheating summary"
    assert "failure" in call["type"].lower()
    assert disp.stats["sent"] == 1


async def test_apprise_failure_is_retried(w, apprise_schema):
    apprise_schema.clear()
    FAIL.append(True)
    try:
        [notifier] = build_notifiers([w.config("chat", "apprise", urls=["gpufleettest://x"], retries=1)],
                                     AlertingConfig())
        disp = NotificationDispatcher([notifier], backoff=0.01)
        await disp.start()
        disp.submit(w.notification())
        assert await disp.join(10)
        await disp.stop()
    finally:
        FAIL.clear()
    assert len(apprise_schema) == 2 and disp.stats["failed"] == 1


async def test_apprise_rejects_unknown_url(w, apprise_schema):
    with pytest.raises(ConfigError, match="apprise does not understand"):
        build_notifiers([w.config("chat", "apprise", urls=["nosuchscheme://x"])], AlertingConfig())


async def test_user_mail_goes_to_the_mapped_address(w, apprise_schema):
    apprise_schema.clear()
    alerting = AlertingConfig(notify_users=True, user_notifier="gpufleettest://smtp.example.org?from=gf@x.org")
    notifiers = build_notifiers([], alerting)
    [users] = notifiers
    assert users.name == "users" and users.targeted_only
    disp = NotificationDispatcher(notifiers, backoff=0.01)
    await disp.start()
    plain = w.notification()
    disp.submit(plain)  # a team notification: the user mailer ignores it
    wasted = w.alert()
    wasted.annotations.update(keep_annotations(wasted))  # the alert carries its keep command
    note = Notification(group_key='{rule="wasted",user="alice"}', status="firing", alerts=[wasted],
                        kind="user", title="gpufleet: your GPU on n3 is holding memory but idle",
                        targets=frozenset({"users"}), recipient="alice@example.org")
    disp.submit(note)
    assert await disp.join(10)
    await disp.stop()
    [call] = apprise_schema
    assert call["meta"]["qsd"]["to"] == "alice@example.org"
    assert call["meta"]["qsd"]["from"] == "gf@x.org"
    assert call["title"] == "gpufleet: your GPU on n3 is holding memory but idle"
    # the keep command is scoped to this user on this GPU, so it never mutes a colleague's alert there
    assert call["body"].endswith("If you still need it, keep it for 2h with:\n"
                                 "  gpufleet silence add --host n3 --gpu 2 --user alice --rule wasted "
                                 "--for 2h --comment keep")


# ------------------------------------------------------------------------------------------ dispatcher


class Slow(Notifier):
    def __init__(self, name: str = "slow", **kw: Any) -> None:
        super().__init__(NotifierConfig(name=name, kind="webhook", **kw))
        self.release = asyncio.Event()
        self.got: list[Notification] = []

    async def send(self, notification: Notification) -> None:
        await self.release.wait()
        self.got.append(notification)


async def test_bounded_queue_drops_and_counts(w):
    slow = Slow()
    disp = NotificationDispatcher([slow], queue_size=2, backoff=0.01)
    assert disp.submit(w.notification(group_key="g1")) and disp.submit(w.notification(group_key="g2"))
    assert not disp.submit(w.notification(group_key="g3")), "a third group does not fit"
    assert disp.submit(w.notification(group_key="g2")), "a newer state of a group in the log replaces it"
    assert disp.stats["dropped"] == 1 and disp.queue_depth == 2
    await disp.start()
    slow.release.set()
    assert await disp.join(5)
    assert len(slow.got) == 2 and disp.stats["sent"] == 2 and disp.queue_depth == 0
    await disp.stop()


async def test_stop_keeps_what_it_cannot_drain(w):
    slow = Slow()
    disp = NotificationDispatcher([slow], queue_size=10)
    await disp.start()
    for i in range(3):
        disp.submit(w.notification(group_key=f"g{i}"))
    await disp.stop(timeout=0.2)
    assert disp.stats["dropped"] == 0 and disp.queue_depth == 3, "undelivered stays in the log for a restart"
    assert not disp.submit(w.notification()), "stopped: refuses"


async def test_a_stuck_notifier_does_not_block_the_others(w):
    slow, fast = Slow("slow"), Slow("fast")
    fast.release.set()
    disp = NotificationDispatcher([slow, fast], queue_size=10)
    await disp.start()
    disp.submit(w.notification())
    for _ in range(50):
        if fast.got:
            break
        await asyncio.sleep(0.02)
    assert len(fast.got) == 1 and slow.got == []
    slow.release.set()
    assert await disp.join(5)
    await disp.stop()


async def test_per_notifier_filters(w):
    crit = Slow("crit", min_severity="critical")
    only_wasted = Slow("wasted", rules=["wasted"], send_resolved=False)
    for n in (crit, only_wasted):
        n.release.set()
    disp = NotificationDispatcher([crit, only_wasted])
    await disp.start()
    disp.submit(w.notification(w.alert("wasted"), w.alert("overheating", severity="critical", gpu="0")))
    disp.submit(w.notification(w.alert("wasted", "resolved"), group_key="other"))
    assert await disp.join(5)
    await disp.stop()
    assert [[a.rule for a in n.alerts] for n in crit.got] == [["overheating"]]
    assert [[a.rule for a in n.alerts] for n in only_wasted.got] == [["wasted"]]
    assert only_wasted.got[0].status == "firing"


# ---------------------------------------------------------------------------------------------- build


def test_build_names_one_notifier_per_url_and_checks_config(w, monkeypatch):
    notifiers = build_notifiers([w.config("hooks", urls=["http://127.0.0.1:1/a", "http://127.0.0.1:2/b"]),
                                 w.config("am", "alertmanager", urls=["http://127.0.0.1:9093"])],
                                AlertingConfig())
    assert [n.name for n in notifiers] == ["hooks#1", "hooks#2", "am"]
    assert notifiers[2].url == "http://127.0.0.1:9093/api/v2/alerts"  # type: ignore[attr-defined]
    assert notifiers[2].refresh_interval == 60.0
    with pytest.raises(ConfigError, match="HOOK_MISSING is not set"):
        build_notifiers([w.config(urls=["env:HOOK_MISSING"])], AlertingConfig())
    with pytest.raises(ConfigError, match="needs at least one URL"):
        build_notifiers([w.config()], AlertingConfig())
    with pytest.raises(ConfigError, match="needs 'command'"):
        build_notifiers([w.config("c", "command")], AlertingConfig())
    with pytest.raises(ConfigError, match="used twice"):
        build_notifiers([w.config(urls=["http://x/"]), w.config(urls=["http://y/"])], AlertingConfig())
    with pytest.raises(ConfigError, match="user_notifier"):
        build_notifiers([], AlertingConfig(notify_users=True))


def test_secret_from_file(w, tmp_path):
    secret = tmp_path / "hook-url"
    secret.write_text("http://127.0.0.1:5/secret-path\n")
    [n] = build_notifiers([w.config(urls=[f"file:{secret}"])], AlertingConfig())
    assert n.url == "http://127.0.0.1:5/secret-path"  # type: ignore[attr-defined]
    assert "secret-path" not in n.describe()
    with pytest.raises(ConfigError, match="cannot read secret file"):
        build_notifiers([w.config(urls=[f"file:{tmp_path / 'missing'}"])], AlertingConfig())


def test_redact_url():
    assert redact_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/***"
    assert redact_url("http://user:pw@127.0.0.1:9093") == "http://127.0.0.1:9093/***"
    assert redact_url("http://127.0.0.1:9093") == "http://127.0.0.1:9093"
    assert redact_url("tgram://123456:ABCDEF/987") == "tgram://***"
    assert redact_url("mailtos://user:pass@gmail.com") == "mailtos://***"
    assert redact_url("env:SLACK") == "env:SLACK"
    assert redact_url("no scheme at all") == "***"
