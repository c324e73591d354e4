"""Checks that hold for any install (editable or wheel): CI runs this file again inside a venv that has
only the built wheel, so a file missing from the package data fails here."""

from __future__ import annotations

import importlib.resources
import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_packages_import_and_ship_py_typed() -> None:
    for name in ("gpufleet.agent", "gpufleet.collector", "gpufleet.cli"):
        files = importlib.resources.files(name)
        assert files.joinpath("py.typed").is_file(), f"{name} lacks py.typed"


def test_bundled_scenarios_are_packaged() -> None:
    scenarios = importlib.resources.files("gpufleet.agent.scenarios")
    names = {p.name for p in scenarios.iterdir() if p.name.endswith(".yaml")}
    assert {"busy.yaml", "wasting.yaml", "hot.yaml", "zombie.yaml"} <= names


def test_console_scripts_run() -> None:
    out = subprocess.run([str(BIN / "gpufleet-agent"), "--fake", "busy", "--once", "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    frame = json.loads(out.strip().splitlines()[-1])
    assert frame["type"] == "snapshot" and frame["gpus"], frame
    help_text = subprocess.run([str(BIN / "gpufleet"), "--help"], capture_output=True, text=True,
                               timeout=60, check=True).stdout
    for command in ("status", "history", "alerts", "demo"):
        assert command in help_text
