"""Fixtures for the config loader tests: write a YAML file into tmp_path and load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from gpufleet.collector.config import ConfigErrors, load_config
from gpufleet.collector.settings import Config

Loader = Callable[..., Config]
Failer = Callable[..., ConfigErrors]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME with an (empty) ~/.ssh/known_hosts, so hosts without known_hosts pass the strict-policy check
    wherever the suite runs; tests of that check remove it."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str], Path]:
    def _write(text: str, name: str = "gpufleet.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path
    return _write


@pytest.fixture
def load(write: Callable[[str], Path]) -> Loader:
    def _load(text: str, env: dict[str, str] | None = None) -> Config:
        return load_config(write(text), env=env or {})
    return _load


@pytest.fixture
def fail(write: Callable[[str], Path]) -> Failer:
    def _fail(text: str, env: dict[str, str] | None = None) -> ConfigErrors:
        path = write(text)
        with pytest.raises(ConfigErrors) as info:
            load_config(path, env=env or {})
        assert all(e.path == str(path) for e in info.value.errors)
        return info.value
    return _fail
