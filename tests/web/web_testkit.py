"""Helpers for the web page tests: a real collector (SimFleet behind real SSH on loopback, web enabled) on
an event loop in a thread. A module name of its own: the suite runs with --import-mode=importlib."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, StorageConfig, WebConfig, default_rules
from gpufleet.collector.simfleet import SimFleet

from tests.builders import GIB, LoopThread, gpu, proc, snap

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium_missing() -> str | None:
    """Why a browser test cannot run here (None: it can)."""
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        return f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium"
    return None


def chromium(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium through the system chromedriver, its page ``width`` x ``height`` CSS pixels (set
    by emulation: a headless window is never narrower than 500 px, a phone is)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={max(width, 800)},{height}", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    if width < 800:
        page_size(driver, width, height)
    return driver


def page_size(driver: Any, width: int, height: int) -> None:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
HOSTS = {"n1": "wasting", "n2": "busy", "n3": "idle"}
TOKEN = "s3cret-t0ken"


class Site:
    """A simulated fleet and a collector serving the page; ``url`` is the page's address."""

    def __init__(self, tmp: Path, web: WebConfig) -> None:
        self.tmp, self.web = tmp, web
        self.lt = LoopThread()
        self.fleet = SimFleet(HOSTS, interval=0.2, workdir=tmp / "fleet")
        self.collector: Collector | None = None

    async def _start(self) -> None:
        await self.fleet.start()
        rules = default_rules()
        rules["wasted"].params["for"] = 1.0
        rules["idle"].params["for"] = 1.0
        cfg = Config(hosts=self.fleet.host_configs(), rules=rules,
                     storage=StorageConfig(path=str(self.tmp / "fleet.db"), batch_max_delay=0.05),
                     api=ApiConfig(socket=str(self.tmp / "api.sock")), web=self.web)
        self.collector = Collector(cfg)
        await self.collector.start()

    async def _stop(self) -> None:
        if self.collector is not None:
            await self.collector.stop()
        await self.fleet.stop()

    def start(self) -> Site:
        self.lt.run(self._start())
        return self

    def stop(self) -> None:
        try:
            self.lt.run(self._stop())
        finally:
            self.lt.close()

    @property
    def url(self) -> str:
        assert self.collector is not None and self.collector.web_url is not None
        return self.collector.web_url


class Alerts:
    def __init__(self) -> None:
        self.records: list[AlertRecord] = []

    def active(self) -> list[AlertRecord]:
        return self.records


class Store:
    async def usage_by_user(self, **_: Any) -> list[Any]:
        return []

    async def gpu_history(self, *_: Any, **__: Any) -> list[Any]:
        return []

    async def fleet_history(self, **_: Any) -> list[Any]:
        return []

    async def load_alerts(self, **_: Any) -> list[Any]:
        return []


class Source:
    """A synthetic WebSource: ``hosts`` x ``gpus`` in a live view, no store history, alerts as set."""

    def __init__(self, hosts: int = 3, gpus: int = 2) -> None:
        self.config = Config(rules=default_rules())
        self.live = LiveView()
        self.alerts = Alerts()
        self.store = Store()
        self.gpus = gpus
        for h in range(hosts):
            self.live.hosts[f"h{h}"] = HostState(name=f"h{h}", status="up", last_seen=1.0)
            self.set_util(f"h{h}", 50)

    def set_util(self, host: str, util: int, user: str = "alice", command: str = "python train.py") -> None:
        gpus = [gpu(i, host=host, util=util, mem=40 * GIB, temp=60,
                    procs=[proc(1, user, mem_gib=40, command=command)]) for i in range(self.gpus)]
        self.live.hosts[host].snapshot = snap(*gpus, ts=time.time(), seq=1)
