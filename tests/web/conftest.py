"""Fixtures for the web page tests: a real collector (web_testkit.Site) and a real headless Chromium driven
by selenium through the system chromedriver (never a downloaded one). Without /usr/bin/chromium or
chromedriver the browser tests skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.settings import WebConfig

from tests.web.web_testkit import TOKEN, Site, chromium, chromium_missing


def _site(tmp_path_factory: pytest.TempPathFactory, name: str, web: WebConfig) -> Iterator[Site]:
    site = Site(tmp_path_factory.mktemp(name), web).start()
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Open page, commands shown (the defaults but for the port)."""
    yield from _site(tmp_path_factory, "site", WebConfig(enabled=True, listen="127.0.0.1:0"))


@pytest.fixture(scope="module")
def private_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A token and ``show_commands: false``."""
    web = WebConfig(enabled=True, listen="127.0.0.1:0", token=TOKEN, show_commands=False)
    yield from _site(tmp_path_factory, "private", web)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = chromium_missing()
    if missing:
        pytest.skip(missing)
    driver = chromium(1400, 1000)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Any:
    """``shots(driver, name)`` saves a screenshot under the test's tmp dir and prints where."""

    def save(driver: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        driver.save_screenshot(str(path))
        print(f"screenshot: {path}")
        return path

    return save


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
