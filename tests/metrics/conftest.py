"""Fixtures for the metrics tests. Helpers live in metrics_testkit.py, put on sys.path here because the
suite runs with --import-mode=importlib (the module name is unique to avoid clashing with other dirs)."""

from __future__ import annotations

import shutil

import pytest

from tests.metrics.metrics_testkit import StandIn


@pytest.fixture
def source() -> StandIn:
    return StandIn()


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool") or shutil.which("promtool", path="/usr/bin")
    if path is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return path
