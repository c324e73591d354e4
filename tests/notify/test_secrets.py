"""Secrets never reach the logs: every failing channel, with DEBUG logging on for every logger (apprise's own
logger prints full request URLs at DEBUG), is checked for the secret's absence."""

from __future__ import annotations

import base64
import logging
import socket
import sys
from pathlib import Path

import pytest
from gpufleet.collector.notify.base import Notification, Notifier
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import AlertingConfig, NotifierConfig

SECRET = "xoxb-9f8e7d6c5b4a-SECRET"


async def run_once(notifiers, notification) -> NotificationDispatcher:
    disp = NotificationDispatcher(notifiers, backoff=0.01)
    await disp.start()
    disp.submit(notification)
    assert await disp.join(10)
    await disp.stop()
    return disp


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def logged(caplog: pytest.LogCaptureFixture, disp: NotificationDispatcher) -> str:
    return caplog.text + "\n".join(disp.last_error.values())


async def test_webhook_url_that_urllib_rejects_is_not_quoted(w, caplog, monkeypatch):
    # no scheme: the HTTP client refuses it, and may quote the whole URL in its error
    monkeypatch.setenv("HOOK_URL", f"127.0.0.1:9/hooks/{SECRET}")
    [n] = build_notifiers([w.config(urls=["env:HOOK_URL"], retries=1)], AlertingConfig())
    caplog.set_level(logging.DEBUG)
    disp = await run_once([n], w.notification())
    text = logged(caplog, disp)
    assert disp.stats["failed"] == 1
    assert "missing an 'http://' or 'https://' protocol" in text, "the error is still explained"
    assert SECRET not in text


class Broken(Notifier):
    """A channel failing with an exception nobody planned for, whose text quotes its URL."""

    def __init__(self) -> None:
        super().__init__(NotifierConfig(name="broken", kind="webhook", urls=["x"]))
        self.secret_values = [f"https://hooks.example.org/{SECRET}"]

    async def send(self, notification: Notification) -> None:
        raise RuntimeError(f"cannot post to https://hooks.example.org/{SECRET}")


async def test_unexpected_exception_text_and_traceback_are_scrubbed(w, caplog):
    caplog.set_level(logging.DEBUG)
    disp = await run_once([Broken()], w.notification())
    text = logged(caplog, disp)
    assert disp.last_error["broken"] == "notifier broken: RuntimeError: cannot post to ***"
    assert "Traceback (most recent call last)" in text, "the traceback is still logged at DEBUG"
    assert SECRET not in text


async def test_alertmanager_basic_auth_and_5xx(w, receiver, caplog):
    receiver.statuses = [502, 503]
    base = receiver.base.replace("http://", f"http://gpufleet:{SECRET}@")
    [n] = build_notifiers([w.config("am", "alertmanager", urls=[base], retries=1,
                                    headers={"X-Scope-OrgID": "tenant-" + SECRET})], AlertingConfig())
    caplog.set_level(logging.DEBUG)
    disp = await run_once([n], w.notification())
    assert len(receiver.requests) == 2 and disp.stats["failed"] == 1
    # credentials in the URL become a Basic auth header (urllib alone would try to resolve "user:pw@host")
    assert receiver.requests[0].headers["Authorization"] == "Basic " + base64.b64encode(
        f"gpufleet:{SECRET}".encode()).decode()
    assert receiver.requests[0].path == "/api/v2/alerts"
    text = logged(caplog, disp)
    assert "answered HTTP 503" in text and "undelivered after 2 attempts" in text
    assert SECRET not in text


async def test_apprise_debug_log_does_not_show_the_url(w, receiver, caplog):
    pytest.importorskip("apprise")
    receiver.statuses = [500, 500]
    url = receiver.base.replace("http://", "json://") + f"/notify/{SECRET}"
    [n] = build_notifiers([w.config("chat", "apprise", urls=[url], retries=1)], AlertingConfig())
    caplog.set_level(logging.DEBUG)
    disp = await run_once([n], w.notification())
    assert len(receiver.requests) == 2 and receiver.requests[0].path == f"/notify/{SECRET}"
    text = logged(caplog, disp)
    assert "JSON POST URL" in text, "apprise logged its request line (scrubbed)"
    assert SECRET not in text
    # and a connection error, whose text (requests' "Max retries exceeded with url: ...") quotes the path
    url2 = f"json://127.0.0.1:{closed_port()}/down/{SECRET}"
    [n2] = build_notifiers([w.config("chat2", "apprise", urls=[url2], retries=0)], AlertingConfig())
    caplog.clear()
    disp2 = await run_once([n2], w.notification())
    assert disp2.stats["failed"] == 1
    assert SECRET not in logged(caplog, disp2)


async def test_command_stderr_echoing_its_token(w, tmp_path: Path, caplog, monkeypatch):
    script = tmp_path / "post.py"
    script.write_text("import sys\n"
                      "print('auth failed for token ' + sys.argv[1], file=sys.stderr)\nsys.exit(1)\n")
    # the config loader expands ${TOKEN} before build_notifiers sees it: the token arrives as a plain value
    cmd = [sys.executable, str(script), SECRET]
    [n] = build_notifiers([w.config("cmd", "command", command=cmd, retries=1)], AlertingConfig())
    caplog.set_level(logging.DEBUG)
    disp = await run_once([n], w.notification())
    text = logged(caplog, disp)
    assert disp.stats["failed"] == 1 and "auth failed for token ***" in text
    assert SECRET not in text
