"""Fixtures for the CLI / query API tests (their helpers: tests/cli/cli_testkit.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from gpufleet.collector.faces.api.server import QueryServer

from tests.cli.cli_testkit import StandinCollector, cli_env

FLEET = {"n1": "busy", "n2": "wasting", "n3": "hot", "n4": "zombie", "n5": "lost", "n6": "down"}
TAGS = {"n1": ["a100", "prod"], "n2": ["a100"], "n3": ["h100"], "n4": ["h100"], "n5": ["a100"], "n6": ["old"]}


@pytest.fixture
def home() -> Iterator[Path]:
    """A short temp dir (Unix socket paths are limited to ~107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="gfcli-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def standin() -> StandinCollector:
    return StandinCollector(FLEET, gpus=4, tags=TAGS)


@pytest.fixture
async def server(standin: StandinCollector, home: Path) -> AsyncIterator[QueryServer]:
    srv = QueryServer(standin, home / "run" / "gpufleet.sock", 0o600)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
def env(home: Path, server: QueryServer) -> dict[str, str]:
    return cli_env(home, GPUFLEET_SOCKET=str(server.path))
