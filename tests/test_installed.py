"""Checks that hold for any install (editable or wheel): CI runs this file again inside a venv that has
only the built wheel, so a file missing from the package data fails here."""

from __future__ import annotations

import importlib.metadata
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


def test_web_page_assets_are_packaged() -> None:
    static = importlib.resources.files("gpufleet.collector.faces.web").joinpath("static")
    for name in ("index.html", "app.js", "app.css"):
        text = static.joinpath(name).read_text(encoding="utf-8")
        assert text and "https://" not in text and "http://" not in text, name  # nothing from a CDN


def test_console_scripts_run() -> None:
    out = subprocess.run([str(BIN / "gpufleet-agent"), "--fake", "busy", "--once", "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    frame = json.loads(out.strip().splitlines()[-1])
    assert frame["type"] == "snapshot" and frame["gpus"], frame
    help_text = subprocess.run([str(BIN / "gpufleet"), "--help"], capture_output=True, text=True,
                               timeout=60, check=True).stdout
    for command in ("status", "top", "history", "alerts", "demo"):
        assert command in help_text


def _editable() -> bool:
    """The code is imported from a checkout, not from the environment (pip install -e)."""
    import gpufleet.cli

    return not Path(gpufleet.cli.__file__).resolve().is_relative_to(Path(sys.prefix).resolve())


def test_licence_and_operator_guide_ship() -> None:
    """The licence travels in the metadata; a wheel install puts the operator's guide where the systemd
    unit's Documentation= points (<prefix>/share/doc/gpufleet) and the deploy files beside it."""
    dist = importlib.metadata.distribution("gpufleet")
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    texts = [Path(str(f.locate())).read_text() for f in dist.files or [] if f.name == "LICENSE"]
    assert texts and "Apache License" in texts[0]
    classifiers = dist.metadata.get_all("Classifier") or []
    assert "Topic :: System :: Monitoring" in classifiers
    if _editable():
        return  # an editable install has no data files; the wheel venv in .ci/run checks them
    share = Path(sys.prefix) / "share"
    assert "systemd" in (share / "doc" / "gpufleet" / "OPERATOR.md").read_text()
    unit = (share / "gpufleet" / "deploy" / "gpufleet-collector.service").read_text()
    assert "Documentation=file:///opt/gpufleet/share/doc/gpufleet/OPERATOR.md" in unit
    assert (share / "gpufleet" / "deploy" / "gpufleet.yaml").is_file()
