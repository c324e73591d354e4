"""The web server without a browser: deltas carry only what changed (readings within a byte budget, the rest
later), a stream that does not read is dropped while others go on, the number of streams is capped, and
the server answers only what it should (GET, known paths, checked arguments)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import pytest
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.faces.web import model
from gpufleet.collector.faces.web.server import WebServer
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.settings import WebConfig

from tests.web.web_testkit import Source


def state_of(src: Source) -> model.State:
    inp = model.Inputs(model.freeze_hosts(src.live.hosts.values()), src.alerts.active(), {}, time.time())
    return model.build_state(inp, thresholds_of(src.config.rules), show_commands=True)


def test_diff_sends_only_what_changed_and_defers_readings_over_budget() -> None:
    src = Source(hosts=3)
    sent = state_of(src)
    assert model.diff(sent, state_of(src), soft_budget=10_000) == (None, 0)

    src.set_util("h1", 77)
    body, deferred = model.diff(sent, state_of(src), soft_budget=10_000)
    assert body is not None and deferred == 0
    d = json.loads(body)
    assert d == {"s": {"h1/0": [77, 40960, 60], "h1/1": [77, 40960, 60]}}

    # a budget for one reading: the biggest move goes now, the other next tick
    src.set_util("h0", 10)
    src.set_util("h2", 49)
    body, deferred = model.diff(sent, state_of(src), soft_budget=len('"h0/0":[10,40960,60]') + 1)
    assert deferred == 3 and list(json.loads(body or "")["s"]) == ["h0/0"]
    seen: set[str] = set()
    for _ in range(3):
        body, _ = model.diff(sent, state_of(src), soft_budget=len('"h0/0":[10,40960,60]') + 1)
        seen |= set(json.loads(body or "{}").get("s", {}))
    assert seen == {"h0/1", "h2/0", "h2/1"}
    assert sent == state_of(src) | {"totals": sent["totals"]}

    # structure always goes, whole: a new user on the GPU, a host down, an alert, a GPU gone
    src.set_util("h2", 49, user="bob")
    src.live.hosts["h0"].status = "down"
    src.alerts.records = [AlertRecord(fingerprint="f1", rule="wasted", severity="warning", state="firing",
                                      labels={"host": "h1", "gpu": "0", "user": "alice"})]
    d = json.loads(model.diff(sent, state_of(src), soft_budget=1)[0] or "")
    assert set(d) >= {"g", "hc", "a", "t"} and d["g"]["h2/0"][model.P][0][0] == "bob"
    assert d["hc"]["h0"][1] == "down" and d["a"]["f1"][0] == "wasted" and "wasted" in d["g"]["h1/0"][model.F]
    src.alerts.records = []
    del src.live.hosts["h2"]
    d = json.loads(model.diff(sent, state_of(src), soft_budget=1)[0] or "")
    assert d["ar"] == ["f1"] and sorted(d["gr"]) == ["h2/0", "h2/1"]
    assert [h[0] for h in d["h"]] == ["h0", "h1"]


async def _open_stream(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=16 << 20)
    writer.write(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    return reader, writer


def _stuck_stream(port: int) -> socket.socket:
    """A page that asks for the stream and then reads nothing (a plain socket: an asyncio stream would
    read into memory on its own)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return sock


async def test_a_stream_that_does_not_read_is_dropped_and_the_others_go_on() -> None:
    src = Source(hosts=200, gpus=8)
    web = WebConfig(enabled=True, listen="127.0.0.1:0")
    async with WebServer(src, web, interval=0.02, write_timeout=0.5, soft_budget=200_000) as srv:
        srv.broadcaster.queue_size = 4
        stuck = _stuck_stream(srv.port)
        reader, writer = await _open_stream(srv.port)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        deltas = 0
        deadline = time.monotonic() + 20
        while (srv.broadcaster.stats["dropped"] < 1 or deltas < 5) and time.monotonic() < deadline:
            for h in range(200):
                src.set_util(f"h{h}", (deltas * 7 + h) % 100)
            event = await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)
            deltas += event.startswith(b"event: delta")
        assert srv.broadcaster.stats["dropped"] >= 1 and len(srv.broadcaster.clients) == 1
        assert deltas >= 5
        stuck.close()
        writer.close()


async def test_the_stream_builds_on_the_servers_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's builds never queue on the default executor that getaddrinfo and library calls share
    (issue 11.2): they run on the web server's own threads."""
    built_on: list[str] = []
    real = model.build_state

    def spy(*args: Any, **kw: Any) -> Any:
        built_on.append(threading.current_thread().name)
        return real(*args, **kw)

    monkeypatch.setattr(model, "build_state", spy)
    src = Source(hosts=4, gpus=2)
    async with WebServer(src, WebConfig(enabled=True, listen="127.0.0.1:0"), interval=0.02) as srv:
        reader, writer = await _open_stream(srv.port)
        await asyncio.wait_for(reader.readuntil(b"event: full"), 10)  # the page's first state, built
        writer.close()
    assert built_on and all(name.startswith("gpufleet-web-page") for name in built_on), built_on


async def test_streams_are_capped_and_only_get_is_served() -> None:
    src = Source()
    web = WebConfig(enabled=True, listen="127.0.0.1:0", max_clients=1)
    async with WebServer(src, web) as srv:
        reader, writer = await _open_stream(srv.port)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert b"event: full" in await reader.readuntil(b"\n\n") + await reader.readuntil(b"\n\n")

        async def ask(raw: bytes) -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", srv.port)
            w.write(raw)
            await w.drain()
            out = await asyncio.wait_for(r.read(), 10)
            w.close()
            return out

        assert (await ask(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")).startswith(b"HTTP/1.1 503")
        # DNS rebinding: a loopback server answers only to loopback names
        for host in (b"localhost:1", b"[::1]:8", b"127.0.0.1"):
            assert (await ask(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        for host in (b"evil.example", b"evil.example:80", b"127.0.0.1.evil.example"):
            assert (await ask(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")).startswith(b"HTTP/1.1 403")
        assert (await ask(b"POST /api/state HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await ask(b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await ask(b"GET /api/history?host=zz&gpu=0 HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await ask(b"GET /api/history?host=h0&gpu=x HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await ask(b"GET /api/history?host=h0&gpu=0&range=1y HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 400")
        ok = await ask(b"GET /api/history?host=h0&gpu=0&range=24h HTTP/1.1\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200") and b'"series":null' in ok
        page = await ask(b"GET / HTTP/1.1\r\n\r\n")
        assert b"Content-Security-Policy: default-src 'none'" in page and b"<title>gpufleet</title>" in page
        assert b"http://" not in page.split(b"\r\n\r\n", 1)[1] and b"https://" not in page  # no CDN
        writer.close()


async def test_a_port_in_use_is_a_config_error_naming_web_listen() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        server = WebServer(Source(), WebConfig(enabled=True, listen=f"127.0.0.1:{port}"))
        with pytest.raises(ConfigError) as info:
            await server.start()
    assert info.value.key == "web.listen" and f"127.0.0.1:{port}" in str(info.value)
