"""The house's rules, checked on its own source: a fact about a rule has one owner (the rule catalog), the
CLI's model is light, the faces read the daemon through one typed view, and the service does not load the
simulator (issue 35)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpufleet.collector.rules import catalog

REPO = Path(__file__).resolve().parents[1]
PRODUCT = [p for d in ("collector", "cli") for p in sorted((REPO / d).rglob("*.py"))]
CATALOG = REPO / "collector" / "rules" / "catalog.py"

#: every rule parameter name the catalog knows, and the three every rule has
PARAMS = sorted({f for r in catalog.RULES for f in r.params.defaults()} | {"for", "severity",
                                                                          "keep_firing_for"})
#: a second default for a rule parameter: a fallback in a lookup, the old helper, or a literal map of ranks
SECOND_DEFAULTS = [
    re.compile(r"param_float\("),
    re.compile(r"""\.get\(\s*["'](?:""" + "|".join(PARAMS) + r""")["']\s*,"""),
    re.compile(r"""DEFAULT_RULES\[[^]]+\]\[["']"""),
    re.compile(r"""["'](?:info|warning|critical)["']\s*:\s*\d"""),  # a severity order of its own
    re.compile(r"""["'](?:overheating|orphaned_memory|gpu_lost|throttling)["']\s*:\s*["']"""),  # flag names
]


def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_no_rule_fact_has_a_second_owner() -> None:
    found = []
    for path in PRODUCT:
        if path == CATALOG:
            continue
        for n, line in enumerate(_source(path).splitlines(), 1):
            for pat in SECOND_DEFAULTS:
                if pat.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "rule facts restated outside collector/rules/catalog.py:\n" + "\n".join(found)


def test_the_web_page_keeps_no_copy_of_the_catalog() -> None:
    page = _source(REPO / "collector" / "faces" / "web" / "static" / "app.js")
    assert "FLAG_ORDER" not in page and "critical: 0" not in page
    flags_with_colour = [f for f in catalog.FLAGS if catalog.BY_FLAG[f].colour]
    css = _source(REPO / "collector" / "faces" / "web" / "static" / "app.css")
    copied = [f for f in flags_with_colour if f".{f} " in css or f".{f}{{" in css]
    assert not copied, f"flag colours in app.css: {copied}"


def _loaded_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_the_cli_renders_alerts_without_the_store() -> None:
    loaded = _loaded_by("gpufleet.cli.render_alerts")
    assert "aiosqlite" not in loaded
    assert not {m for m in loaded if m.startswith("gpufleet.collector.store")}


def test_the_status_screen_loads_no_yaml_rich_store_or_asyncio() -> None:
    loaded = _loaded_by("gpufleet.cli.status")
    assert not loaded & {"yaml", "rich", "aiosqlite", "asyncio", "asyncssh", "msgspec"}, loaded & {
        "yaml", "rich", "aiosqlite", "asyncio", "asyncssh", "msgspec"}


def test_the_service_does_not_load_the_simulator() -> None:
    loaded = _loaded_by("gpufleet.collector.service.daemon")
    assert not {m for m in loaded if m.startswith("gpufleet.collector.simfleet")}


@pytest.mark.parametrize("face", ["faces/api/ops.py", "faces/api/server.py", "faces/web/server.py",
                                  "faces/web/model.py", "faces/metrics/exporter.py", "faces/source.py"])
def test_the_faces_read_the_daemon_typed(face: str) -> None:
    text = _source(REPO / "collector" / face)
    assert "getattr(" not in text, f"{face} looks a method up by name"
    assert not re.search(r"def \w+\(self\) -> Any", text), f"{face} types a part of the daemon as Any"
