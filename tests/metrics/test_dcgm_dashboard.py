"""NVIDIA's own Grafana dashboard, unchanged, against gpufleet (issue 37).

tests/metrics/dcgm_dashboard.json holds the template variables and panel queries of
grafana/dcgm-exporter-dashboard.json as NVIDIA's dcgm-exporter repository ships it (the file names its
commit). Three simulated hosts, each a real agent on the fake NVML behind real SSH (one with two Hopper GPUs
that have GPM, one with three A100s whose name has a dot, one with a single L40S), the real collector with
``dcgm_names: true``, and a real Prometheus (Debian package) scraping it with ``honor_labels: true`` as
deploy/prometheus.yml does. The host picker (``label_values(DCGM_FI_DEV_GPU_TEMP, instance)``) offers the
three hosts; every panel's query, run as Grafana would with each host picked (the variable interpolated the
way Grafana's Prometheus data source does: a multi-value variable is regex-escaped, "All" is every value),
finds that host's GPUs and only them, one legend per GPU, and its averages and sums are that host's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, MetricsConfig, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import until
from tests.metrics.metrics_testkit import PROMETHEUS, prometheus_scraping
from tests.realcollector import http_get

pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)"),
              pytest.mark.slow]

DASHBOARD = json.loads((Path(__file__).with_name("dcgm_dashboard.json")).read_text())


def _gpu(name: str, temp: int, power: int, gpm: bool, index: int) -> str:
    extra = "\n    sm_active: 60\n    tensor_active: 35\n    util_mem: 40" if gpm else ""
    held = 20 + 10 * index  # GiB: each GPU's framebuffer reads apart
    extra += (f"\n    processes:\n      - {{pid: {5100 + index}, user: carol, command: python train.py, "
              f"memory_mib: {held * 1024}, sm_util: 50}}")
    return f"""
  - name: {name}
    memory_total_mib: 81559
    power_limit_w: 700
    idle_power_w: 70
    util: 50
    temperature: {temp}
    power_w: {power}{extra}"""


#: host -> (its GPUs' (temperature, power), GPM or not, model): readings differ per host, so an average or a
#: sum that took another host's GPU would show
HOSTS: dict[str, tuple[list[tuple[int, int]], bool, str]] = {
    "gpu-h100-1": ([(61, 301), (63, 303)], True, "NVIDIA H100 80GB HBM3"),
    "gpu-a100.lab": ([(71, 211), (72, 212), (76, 216)], False, "NVIDIA A100-SXM4-80GB"),
    "gpu-l40s": ([(50, 150)], False, "NVIDIA L40S"),
}


def _scenario(host: str) -> str:
    readings, gpm, model = HOSTS[host]
    gpus = "".join(_gpu(model, t, p, gpm, i) for i, (t, p) in enumerate(readings))
    return f"hostname: {host}\ngpus:{gpus}\n"


def grafana_regex(values: Sequence[str]) -> str:
    """A multi-value variable as Grafana's Prometheus data source puts it in a query: each value regex-escaped
    (prometheusSpecialRegexEscape: a backslash before ``$^*{}[]+?.()|``, doubled inside a PromQL string),
    one value as itself, several as ``(a|b)``."""
    escaped = [re.sub(r"([$^*{}\[\]+?.()|])", r"\\\\\1", v.replace("\\", "\\\\\\\\")) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(expr: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), expr)


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


class Prometheus:
    def __init__(self, base: str) -> None:
        self.base = base

    async def api(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        doc = json.loads(await asyncio.to_thread(http_get, url))
        assert doc["status"] == "success", doc
        return doc["data"]

    async def ready(self) -> bool:
        try:
            await asyncio.to_thread(http_get, f"{self.base}/-/ready")
            return True
        except OSError:
            return False


async def test_nvidia_dashboard_unchanged_finds_each_hosts_gpus_and_only_them(tmp_path: Path) -> None:
    scenarios = {}
    for host in HOSTS:
        path = tmp_path / f"{host}.yaml"
        path.write_text(_scenario(host))
        scenarios[host] = str(path)
    async with SimFleet(scenarios, interval=0.2, workdir=tmp_path / "fleet") as fleet:
        cfg = Config(hosts=fleet.host_configs(), storage=StorageConfig(path=str(tmp_path / "db.sqlite")),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")),
                     metrics=MetricsConfig("127.0.0.1:0", dcgm_names=True), rules=default_rules())
        collector = Collector(cfg)
        await collector.start()
        target = f"127.0.0.1:{collector.metrics_port}"
        try:
            async with prometheus_scraping(tmp_path, target) as running:
                await _check_dashboard(Prometheus(running.base), target)
        finally:
            await collector.stop()


async def _check_dashboard(prom: Prometheus, target: str) -> None:
    variables = {v["name"]: v for v in DASHBOARD["templating"]}
    assert variables["instance"]["query"] == "label_values(DCGM_FI_DEV_GPU_TEMP, instance)"
    gpm_hosts = [h for h, (_, gpm, _) in HOSTS.items() if gpm]

    async def scraped() -> bool:
        if not await prom.ready():
            return False
        temps = (await prom.api("/api/v1/query", query="DCGM_FI_DEV_GPU_TEMP"))["result"]
        tensor = (await prom.api("/api/v1/query", query="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"))["result"]
        return len(temps) == sum(len(r) for r, _, _ in HOSTS.values()) and len(tensor) == 2

    await until(scraped, timeout=60.0)  # every GPU's series in Prometheus
    await asyncio.sleep(3)  # a few more scrapes: the range queries below span them

    # the template variables, as Grafana asks for label_values(metric, label)
    values = {}
    for name in ("instance", "gpu"):
        metric, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variables[name]["query"]).groups()
        values[name] = sorted(await prom.api(f"/api/v1/label/{label}/values", **{"match[]": metric}))
    assert values["instance"] == sorted(HOSTS), values  # one per host, not the collector's address
    assert values["gpu"] == ["0", "1", "2"]
    own = (await prom.api("/api/v1/query", query="gpufleet_collector_uptime_seconds"))["result"]
    assert [r["metric"]["instance"] for r in own] == [target]  # the collector's series keep its address

    end = time.time()
    window = {"start": f"{end - 4:.3f}", "end": f"{end:.3f}", "step": "1"}
    report: list[str] = []
    for host, (readings, gpm, _) in HOSTS.items():
        picked = {"instance": grafana_regex([host]), "gpu": grafana_regex(values["gpu"])}
        mine = {str(i) for i in range(len(readings))}
        for panel in DASHBOARD["panels"]:
            expr = interpolate(panel["expr"], picked)
            series = (await prom.api("/api/v1/query_range", query=expr, **window))["result"]
            aggregate = re.fullmatch(r"(avg|sum)\((.*)\)", expr)
            expected = mine if gpm or "DCGM_FI_PROF_" not in expr else set()
            if aggregate is None:
                got = {(s["metric"]["instance"], s["metric"]["gpu"]) for s in series}
                assert got == {(host, g) for g in expected}, (host, panel["title"], got)
                assert {s["metric"]["Hostname"] for s in series} <= {host}
                legends = [legend(panel["legendFormat"], s["metric"]) for s in series]
                assert sorted(legends) == sorted(f"GPU {g}" for g in expected), (host, panel["title"])
            else:
                raw = (await prom.api("/api/v1/query_range", query=aggregate.group(2), **window))["result"]
                assert {s["metric"]["instance"] for s in raw} == {host}
                [agg] = series
                at = agg["values"][-1][0]
                each = [float(v) for s in raw for t, v in s["values"] if t == at]
                want = sum(each) / len(each) if aggregate.group(1) == "avg" else sum(each)
                assert float(agg["values"][-1][1]) == pytest.approx(want) and len(each) == len(readings)
                fixed = [t if aggregate.group(1) == "avg" else p for t, p in readings]  # the scenario's own
                assert want == pytest.approx(sum(fixed) / len(fixed) if aggregate.group(1) == "avg"
                                             else sum(fixed), rel=0.02), (host, panel["title"])
            if host == gpm_hosts[0]:
                shown = ", ".join(
                    f"{legend(panel['legendFormat'], s['metric']) or 'value'} = {s['values'][-1][1]}"
                    for s in sorted(series, key=lambda s: s["metric"].get("gpu", "")))
                report.append(f"{panel['title']}: {expr}\n    -> {shown or '(no series)'}")
    print(f"\nlabel_values(DCGM_FI_DEV_GPU_TEMP, instance) -> {values['instance']}\n"
          f"label_values(DCGM_FI_DEV_GPU_TEMP, gpu) -> {values['gpu']}\n"
          f"NVIDIA's dashboard with instance = {gpm_hosts[0]} and gpu = All:\n" + "\n".join(report))
