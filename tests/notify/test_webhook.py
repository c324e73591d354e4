"""The JSON webhook against a real HTTP server on 127.0.0.1: payload, retries on 5xx only, timeouts,
secrets from the environment and never in logs."""

from __future__ import annotations

import logging
import socket

from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import AlertingConfig


def make(w, receiver, path: str = "/hook/s3cr3t-path", **kw):
    [notifier] = build_notifiers([w.config(urls=[receiver.base + path], **kw)], AlertingConfig())
    return notifier, NotificationDispatcher([notifier], backoff=0.01)


async def test_payload_is_alertmanager_webhook_like(w, receiver, monkeypatch):
    monkeypatch.setenv("HOOK_TOKEN", "tok-123456")
    notifier, disp = make(w, receiver, headers={"Authorization": "env:HOOK_TOKEN"})
    await disp.start()
    n = w.notification(w.alert("wasted", gpu="2"), w.alert("wasted", "resolved", gpu="3"))
    assert disp.submit(n)
    assert await disp.join(5)
    await disp.stop()
    [req] = receiver.requests
    assert req.path == "/hook/s3cr3t-path"
    assert req.headers["Authorization"] == "tok-123456"
    assert req.headers["Content-Type"] == "application/json"
    body = req.body
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == "hook"
    assert body["groupKey"] == '{host="n3",rule="wasted"}'
    assert body["groupLabels"] == {"host": "n3", "rule": "wasted"}
    assert body["commonLabels"]["alertname"] == "wasted" and body["commonLabels"]["host"] == "n3"
    first, second = body["alerts"]
    assert first["status"] == "firing" and second["status"] == "resolved"
    assert first["labels"] == {"alertname": "wasted", "severity": "warning", "host": "n3", "gpu": "2",
                               "uuid": "GPU-0002", "user": "alice", "rule": "wasted"}
    assert first["annotations"]["summary"] == "wasted summary"
    assert first["startsAt"] == "2023-11-14T22:43:20.000Z"  # fired_at = T0 + 1800
    assert first["endsAt"] == "0001-01-01T00:00:00Z"
    assert second["endsAt"] == "2023-11-14T23:13:20.000Z"
    assert second["annotations"]["resolved"] == "alice released GPU 2 on n3 after 1h"
    assert first["fingerprint"] == "fp-wasted-2"
    assert "RESOLVED alice released GPU 2 on n3 after 1h" in body["message"]
    assert body["title"].startswith("[FIRING:1, 1 resolved] warning: wasted on n3")


async def test_retries_on_500_then_succeeds(w, receiver):
    receiver.statuses = [500, 503]
    _, disp = make(w, receiver, retries=3)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    assert len(receiver.requests) == 3
    assert disp.stats["sent"] == 1 and disp.stats["retries"] == 2 and disp.stats["failed"] == 0
    await disp.stop()


async def test_no_retry_on_400(w, receiver):
    receiver.statuses = [400]
    _, disp = make(w, receiver, retries=3)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    assert len(receiver.requests) == 1
    assert disp.stats["failed"] == 1 and disp.stats["retries"] == 0
    assert "answered HTTP 400" in disp.last_error["hook"]
    await disp.stop()


async def test_gives_up_after_retries(w, receiver):
    receiver.statuses = [500] * 10
    _, disp = make(w, receiver, retries=2)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    assert len(receiver.requests) == 3 and disp.stats["failed"] == 1
    await disp.stop()


async def test_timeout_is_retried_then_fails(w, receiver):
    receiver.delay = 0.6
    _, disp = make(w, receiver, timeout=0.2, retries=1)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(10)
    assert len(receiver.requests) == 2, "a timeout is retried"
    assert disp.stats["failed"] == 1
    assert "timed out" in disp.last_error["hook"]
    await disp.stop()


async def test_connection_refused_is_retried(w):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    [notifier] = build_notifiers([w.config(urls=[f"http://127.0.0.1:{port}/x"], retries=2)], AlertingConfig())
    disp = NotificationDispatcher([notifier], backoff=0.01)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    assert disp.stats["retries"] == 2 and disp.stats["failed"] == 1
    await disp.stop()


async def test_a_url_that_can_never_work_is_not_retried(w):
    """Built in code (the config loader only lets http(s) through): a scheme urllib cannot open."""
    [notifier] = build_notifiers([w.config(urls=["gopher://127.0.0.1/x"], retries=3)], AlertingConfig())
    disp = NotificationDispatcher([notifier], backoff=0.01)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    assert disp.stats["retries"] == 0 and disp.stats["failed"] == 1
    await disp.stop()


async def test_secrets_never_reach_the_logs(w, receiver, monkeypatch, caplog):
    monkeypatch.setenv("HOOK_URL", receiver.base + "/services/T000/B000/topsecretpath")
    monkeypatch.setenv("HOOK_TOKEN", "Bearer very-secret-token")
    receiver.statuses = [500, 400]
    [notifier] = build_notifiers([w.config(urls=["env:HOOK_URL"], headers={"Authorization": "env:HOOK_TOKEN"},
                                           retries=3)], AlertingConfig())
    assert notifier.describe() == "hook (webhook env:HOOK_URL)"
    disp = NotificationDispatcher([notifier], backoff=0.01)
    caplog.set_level(logging.DEBUG)
    await disp.start()
    disp.submit(w.notification())
    assert await disp.join(5)
    await disp.stop()
    assert receiver.requests[0].headers["Authorization"] == "Bearer very-secret-token"
    assert disp.stats["failed"] == 1
    text = caplog.text + " ".join(disp.last_error.values())
    assert "answered HTTP 400" in text
    assert "topsecretpath" not in text and "very-secret-token" not in text
