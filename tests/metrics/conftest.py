"""Fixtures for the metrics tests (their helpers: tests/metrics/metrics_testkit.py)."""

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
