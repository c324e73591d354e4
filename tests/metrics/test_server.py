"""The /metrics HTTP server over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator

import pytest
from gpufleet.collector.config import parse_listen
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.faces.metrics.exporter import MetricsServer
from gpufleet.collector.fleet.live import LiveView
from prometheus_client import REGISTRY, generate_latest

from tests.metrics.metrics_testkit import StandIn

Response = tuple[int, dict[str, str], bytes]


async def request(port: int, raw: bytes, host: str = "127.0.0.1") -> Response:
    """Send ``raw`` and read until the server closes (it always answers with Connection: close)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert int(headers["content-length"]) == len(body) or not body
    return status, headers, body


def get(path: str, *extra: str, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *extra, "", ""]
    return "\r\n".join(lines).encode()


@pytest.fixture
async def server(source: StandIn) -> AsyncIterator[MetricsServer]:
    srv = MetricsServer(source, "127.0.0.1:0", read_timeout=0.3)
    await srv.start()
    yield srv
    await srv.stop()


async def test_get_metrics_serves_the_text_format(server: MetricsServer) -> None:
    status, headers, body = await request(server.port, get("/metrics"))
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert headers["connection"] == "close"
    text = body.decode()
    assert 'gpufleet_gpu_utilization_percent{gpu="0",host="gpu01",name="NVIDIA A100-SXM4-80GB",' \
           'uuid="GPU-aaaa"} 87.0' in text
    assert "process_resident_memory_bytes" in text  # the collector's own process, same registry
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"


async def test_openmetrics_and_gzip_are_negotiated(server: MetricsServer) -> None:
    accept = "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    status, headers, body = await request(server.port, get("/metrics?x=1", accept, "Accept-Encoding: gzip"))
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert headers["content-encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    assert "gpufleet_gpu_memory_used_bytes" in text


async def test_index_404_405_head(server: MetricsServer) -> None:
    status, headers, body = await request(server.port, get("/"))
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'href="/metrics"' in body
    status, _, _ = await request(server.port, get("/nope"))
    assert status == 404
    status, headers, _ = await request(server.port, get("/metrics", "Content-Length: 0", method="POST"))
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, _, _ = await request(server.port, get("/", method="DELETE"))
    assert status == 405
    status, headers, body = await request(server.port, get("/metrics", method="HEAD"))
    assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


async def test_bad_requests_are_bounded(server: MetricsServer) -> None:
    status, _, _ = await request(server.port, b"garbage\r\n\r\n")
    assert status == 400
    status, _, _ = await request(server.port, get("/metrics", "NoColonHere"))
    assert status == 400
    huge = "X-Big: " + "a" * 20000
    status, _, _ = await request(server.port, get("/metrics", huge))
    assert status == 431
    # a client that never finishes its request head is answered and cut off after read_timeout
    status, _, _ = await request(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    assert status == 408
    # and the server still works afterwards
    status, _, _ = await request(server.port, get("/metrics"))
    assert status == 200


async def test_connection_limit(source: StandIn) -> None:
    async with MetricsServer(source, "127.0.0.1:0", read_timeout=30, max_connections=2) as srv:
        idle = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(2)]
        await asyncio.sleep(0.05)  # let the server accept them
        status, _, _ = await request(srv.port, get("/metrics"))
        assert status == 503
        for _, w in idle:
            w.close()
    # stop() returned although nothing ever finished those requests


async def test_stop_closes_idle_connections_and_the_port(source: StandIn) -> None:
    srv = MetricsServer(source, "127.0.0.1:0", read_timeout=30)
    await srv.start()
    port = srv.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(srv.stop(), 10)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # server side closed
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    await srv.stop()  # idempotent


async def test_exposition_failure_is_a_500_and_not_fatal(source: StandIn) -> None:
    class Flaky(StandIn):  # type: ignore[misc]
        broken = False

        @property
        def live(self) -> LiveView:
            if self.broken:
                raise RuntimeError("live view gone")
            return self._live

        @live.setter
        def live(self, value: LiveView) -> None:
            self._live = value

    flaky = Flaky()
    flaky.broken = True
    async with MetricsServer(flaky, "127.0.0.1:0") as srv:
        status, _, body = await request(srv.port, get("/metrics"))
        assert status == 500 and b"live view gone" in body
        flaky.broken = False
        status, _, _ = await request(srv.port, get("/metrics"))
        assert status == 200


async def test_uses_its_own_registry(server: MetricsServer) -> None:
    assert b"gpufleet_" not in generate_latest(REGISTRY)
    assert b"gpufleet_host_up" in generate_latest(server.registry)


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9835") == ("127.0.0.1", 9835)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("localhost:80") == ("localhost", 80)
    for bad in ("9835", ":9835", "127.0.0.1:http", "127.0.0.1:70000", "::1:9835", "[::1:9835"):
        with pytest.raises(ConfigError) as info:
            parse_listen(bad)
        assert "metrics.listen" in str(info.value)


async def test_port_before_start_and_port_in_use(source: StandIn) -> None:
    srv = MetricsServer(source, "127.0.0.1:0")
    with pytest.raises(RuntimeError):
        _ = srv.port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = MetricsServer(source, f"127.0.0.1:{taken.getsockname()[1]}")
        with pytest.raises(ConfigError) as info:
            await busy.start()
        assert "cannot listen on 127.0.0.1:" in str(info.value)


async def test_ipv6_loopback(source: StandIn) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        srv = MetricsServer(source, "[::1]:0")
        await srv.start()
    except ConfigError:
        pytest.skip("::1 not configured here")
    try:
        assert srv.url == f"http://[::1]:{srv.port}/metrics"
        status, _, _ = await request(srv.port, get("/metrics"), host="::1")
        assert status == 200
    finally:
        await srv.stop()
