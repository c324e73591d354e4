"""Fixtures for tests that load the fake libnvidia-ml.so.1 through the real pynvml."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from tests.fakenvml import fakelib


@pytest.fixture(scope="session")
def fake_nvml_build(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``build(omit=...)``: compile a variant once per session and return its library directory."""
    if not fakelib.have_gcc():
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    out = tmp_path_factory.mktemp("fakenvml-lib")

    def build(omit: Iterable[str] = ()) -> Path:
        return fakelib.build(out, omit)

    return build


@pytest.fixture(scope="session")
def fake_nvml_dir(fake_nvml_build: Callable[..., Path]) -> Path:
    """Directory holding the full fake ``libnvidia-ml.so.1`` (put it on LD_LIBRARY_PATH)."""
    return fake_nvml_build()


@pytest.fixture(scope="session")
def agent_cmd() -> list[str]:
    """The installed ``gpufleet-agent`` console script (else ``python -m gpufleet.agent``)."""
    exe = Path(sys.executable).with_name("gpufleet-agent")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpufleet.agent"]
