"""Several collectors behind one Prometheus (issue 17): deploy/prometheus.yml's scrape job pointed at two
replicas (two metrics servers exporting the same fleet, labelled collector/shard as the file shows) gives
every dashboard panel the same answer as one collector does: nothing about hosts, GPUs, users or alerts is
counted twice. Two real Prometheus processes, one per layout, scrape on loopback side by side."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from gpufleet.collector.faces.metrics.exporter import MetricsServer

from tests.builders import free_port
from tests.metrics.metrics_testkit import DEPLOY, StandIn
from tests.metrics.test_prometheus import _VARS, PROMETHEUS, WAIT

pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)"),
              pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

#: Panels about the collectors themselves: with two collectors, two collectors' work (frames, queues,
#: reconnects, notifications) is rightly added up.
COLLECTOR_PANELS = {24, 26, 27, 28}
PER_COLLECTOR_LABELS = {"instance", "job", "collector", "shard"}


def _query(base: str, q: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
        doc = json.loads(resp.read())
    assert doc["status"] == "success", (q, doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def _config(targets: list[tuple[int, dict[str, str]]]) -> str:
    """The shipped scrape job, its targets replaced by ours; scraped every second."""
    doc = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = doc["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"], "labels": labels} for port, labels in targets]
    return yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                           "scrape_configs": [job]})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proms(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("prom-replicas")
    source = StandIn()
    async with MetricsServer(source, "127.0.0.1:0") as one, MetricsServer(source, "127.0.0.1:0") as two:
        layouts = {"one": [(one.port, {"collector": "c1a", "shard": ""})],
                   "pair": [(one.port, {"collector": "c1a", "shard": "1/1"}),
                            (two.port, {"collector": "c1b", "shard": "1/1"})]}
        procs: list[subprocess.Popen[bytes]] = []
        bases: dict[str, str] = {}
        try:
            for name, targets in layouts.items():
                d = tmp / name
                d.mkdir()
                (d / "prometheus.yml").write_text(_config(targets))
                port = free_port()
                assert PROMETHEUS is not None
                with (d / "log").open("wb") as log:
                    procs.append(subprocess.Popen(
                        [PROMETHEUS, f"--config.file={d / 'prometheus.yml'}",
                         f"--storage.tsdb.path={d / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                         "--log.level=warn"],
                        stdout=log, stderr=subprocess.STDOUT, cwd=d))
                bases[name] = f"http://127.0.0.1:{port}"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3 * WAIT
            for name, base in bases.items():  # two scrapes in, so rate() has data
                want = 1 if name == "one" else 2
                q = "count(rate(gpufleet_collector_frames_total[1m]))"
                while True:
                    try:
                        got = await asyncio.to_thread(_query, base, q)
                        if got and float(got[0]["value"][1]) == want:
                            break
                    except OSError:
                        pass
                    if loop.time() > deadline or any(p.poll() is not None for p in procs):
                        log_tail = (tmp / name / "log").read_text()[-2000:]
                        pytest.fail(f"prometheus {name} has no data: {log_tail}")
                    await asyncio.sleep(0.5)
            yield bases
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    await asyncio.to_thread(p.wait, 15)
                except subprocess.TimeoutExpired:
                    p.kill()


def _shape(result: list[dict[str, Any]]) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    return sorted((tuple(sorted((k, v) for k, v in r["metric"].items() if k not in PER_COLLECTOR_LABELS)),
                   round(float(r["value"][1]), 1)) for r in result)


async def test_every_panel_answers_the_same_over_two_replicas(proms: dict[str, str]) -> None:
    doc = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    checked = 0
    for panel in doc["panels"]:
        if panel["id"] in COLLECTOR_PANELS:
            continue
        for t in panel.get("targets", []):
            q = t["expr"]
            for var, value in _VARS.items():
                q = q.replace(var, value)
            if "time()" in q:  # seconds since: the two servers' clocks differ by the query's gap
                q = q.replace("time() - ", "0 * time() + ")
            single = await asyncio.to_thread(_query, proms["one"], q)
            pair = await asyncio.to_thread(_query, proms["pair"], q)
            assert single, (panel["title"], q)
            assert _shape(pair) == _shape(single), (panel["title"], q)
            checked += 1
    assert checked >= 20
    # and the raw series really are there twice: the dedupe is the queries' doing
    raw = await asyncio.to_thread(_query, proms["pair"], "count(gpufleet_gpu_info)")
    deduped = await asyncio.to_thread(_query, proms["one"], "count(gpufleet_gpu_info)")
    assert float(raw[0]["value"][1]) == 2 * float(deduped[0]["value"][1])
