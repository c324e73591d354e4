"""A real Prometheus (Debian package) scrapes the metrics server on loopback.

Also evaluates every PromQL expression of the Grafana dashboard against it, so a typo in a panel shows up
here rather than as an empty panel in production.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from gpufleet.collector.faces.metrics.exporter import MetricsServer

from tests.metrics.metrics_testkit import DEPLOY, PROMETHEUS, StandIn, prometheus_scraping

pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)"),
              pytest.mark.slow,  # Prometheus waits ~5 s before its first scrape; one instance per module
              pytest.mark.asyncio(loop_scope="module")]

WAIT = 20.0  # seconds, for each of: ready, first scrape


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


class Prom:
    def __init__(self, base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.base, self.proc, self.log = base, proc, log

    async def get(self, path: str, **params: str) -> tuple[int, bytes]:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        # blocking urllib in a thread: the metrics server under test shares this event loop
        return await asyncio.to_thread(_get, url)

    async def api(self, path: str, **params: str) -> Any:
        status, body = await self.get(path, **params)
        assert status == 200, (path, params, status, body[:500])
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]

    async def wait_for(self, query: str) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while loop.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited: {self.log.read_text()[-3000:]}")
            result: list[dict[str, Any]] = (await self.api("/api/v1/query", query=query))["result"]
            if result:
                return result
            await asyncio.sleep(0.3)
        pytest.fail(f"no result for {query!r} within {WAIT} s; log: {self.log.read_text()[-3000:]}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prom(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Prom]:
    tmp_path = tmp_path_factory.mktemp("prometheus")
    async with MetricsServer(StandIn(), "127.0.0.1:0") as srv, \
            prometheus_scraping(tmp_path, f"127.0.0.1:{srv.port}") as running:
        p = Prom(running.base, running.proc, running.log)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while (await p.get("/-/ready"))[0] != 200:
            if running.proc.poll() is not None or loop.time() > deadline:
                pytest.fail(f"prometheus not ready: {running.log.read_text()[-3000:]}")
            await asyncio.sleep(0.2)
        yield p


async def test_prometheus_scrapes_gpu_series(prom: Prom) -> None:
    result = await prom.wait_for("gpufleet_gpu_utilization_percent")
    by_gpu = {r["metric"]["gpu"]: r for r in result}
    assert set(by_gpu) == {"0", "1"}  # the down host's GPUs are not exposed
    m = by_gpu["0"]["metric"]
    assert m == {"__name__": "gpufleet_gpu_utilization_percent", "job": "gpufleet",
                 "instance": m["instance"], "host": "gpu01", "gpu": "0", "uuid": "GPU-aaaa",
                 "name": "NVIDIA A100-SXM4-80GB"}
    assert float(by_gpu["0"]["value"][1]) == 87.0
    assert float(by_gpu["1"]["value"][1]) == 0.0

    targets = (await prom.api("/api/v1/targets"))["activeTargets"]
    assert [(t["health"], t["lastError"]) for t in targets] == [("up", "")]

    wasted = (await prom.api("/api/v1/query", query="gpufleet_gpu_wasted == 1"))["result"]
    assert [(r["metric"]["host"], r["metric"]["gpu"]) for r in wasted] == [("gpu01", "1")]
    # counters survive the OpenMetrics round trip with their _total name
    frames = (await prom.api("/api/v1/query", query="gpufleet_collector_frames_total"))["result"]
    assert float(frames[0]["value"][1]) == 150.0
    users = (await prom.api("/api/v1/query", query='gpufleet_user_gpu_memory_bytes{user="alice"}'))["result"]
    assert [float(r["value"][1]) for r in users] == [28 * 2**30]
    # joins the dashboard relies on: memory ratio needs identical label sets on both sides
    q = "gpufleet_gpu_memory_used_bytes / gpufleet_gpu_memory_total_bytes"
    ratio = (await prom.api("/api/v1/query", query=q))["result"]
    assert sorted(round(float(r["value"][1]), 3) for r in ratio) == [0.125, 0.375]


_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m", "$host": ".*", "$user": ".*",
         "${host}": ".*", "${user}": ".*"}


def _dashboard_exprs() -> list[tuple[str, str]]:
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    out = []
    for panel in doc["panels"]:
        for t in panel.get("targets", []):
            out.append((panel["title"], t["expr"]))
    return out


async def test_every_dashboard_query_is_valid_promql_with_data(prom: Prom) -> None:
    await prom.wait_for("rate(gpufleet_collector_frames_total[1m])")  # two scrapes in: rate() has data
    empty = []
    for title, expr in _dashboard_exprs():
        q = expr
        for var, value in _VARS.items():
            q = q.replace(var, value)
        assert "$" not in q, (title, expr)
        data = await prom.api("/api/v1/query", query=q)  # asserts status success: the PromQL parses
        if not data["result"]:
            empty.append((title, q))
    # the stand-in fleet has data for every panel
    assert empty == []
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["query"]["query"])
        assert m, var
        values = await prom.api(f"/api/v1/label/{m[2]}/values", **{"match[]": m[1]})
        assert values, var["name"]
