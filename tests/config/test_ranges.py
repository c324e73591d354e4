"""Issue 38 item 2: every numeric config key has a range, and a value outside it is an error naming the file,
the line and the key. The keys are found by walking the specs the parser itself uses (collector/config/
ranges.py), so a key added later is fed the same values without this file changing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpufleet.collector.config import ConfigErrors, load_config
from gpufleet.collector.config.bounds import Bound
from gpufleet.collector.config.ranges import SECTIONS, numeric_keys, ranges_table
from gpufleet.collector.config.sections import TOP_KEYS
from gpufleet.collector.settings import DEFAULT_RULES

OPERATOR = Path(__file__).resolve().parents[2] / "deploy" / "OPERATOR.md"
#: (as written in YAML, the number it means or None for a string)
VALUES = [("0", 0), ("-1", -1), ("100000000000000000000", 1e20), ("1.0e+20", 1e20), ("lots", None)]
NUMERIC = numeric_keys()


def _place(where: str, name: str, text: str) -> tuple[str, int, str]:
    """A config that sets ``name`` in section ``where`` to ``text``: (YAML, the value's line, the key as the
    error names it)."""
    if where == "":
        return f"{name}: {text}\n", 1, name
    if where == "hosts[]":
        return f"hosts:\n  - name: h1\n    transport: local\n    {name}: {text}\n", 4, f"hosts[h1].{name}"
    if where == "notifiers[]":
        entry = "notifiers:\n  - name: n1\n    kind: command\n    command: /bin/true\n"
        return f"{entry}    {name}: {text}\n", 5, f"notifiers[n1].{name}"
    if where == "collectors[]":
        return f"collectors:\n  - address: /tmp/c.sock\n    {name}: {text}\n", 3, f"collectors[0].{name}"
    head, _, sub = where.partition(".")
    if sub:  # defaults.budget, rules.<name>
        return f"{head}:\n  {sub}:\n    {name}: {text}\n", 3, f"{where}.{name}"
    return f"{where}:\n  {name}: {text}\n", 2, f"{where}.{name}"


def _load(path: Path, text: str) -> ConfigErrors | None:
    path.write_text(text)
    try:
        load_config(path, env={})
    except ConfigErrors as exc:
        return exc
    return None


def test_the_walk_finds_every_kind_of_numeric_key() -> None:
    """A sanity floor for the walk itself: each section's numbers are there (the issue's queue_size too)."""
    found = {(w, n) for w, n, _b in NUMERIC}
    assert {("alerting", "queue_size"), ("", "max_hosts"), ("defaults.budget", "max_gpus"), ("api", "mode"),
            ("storage", "batch_max_rows"), ("hosts[]", "port"), ("notifiers[]", "retries"),
            ("web", "max_clients"), ("rules.wasted", "util_below"), ("rules.xid", "warning_xids"),
            ("rules.idle", "gpus")} <= found
    assert len(found) > 100


@pytest.mark.parametrize(("where", "name", "bound"), NUMERIC,
                         ids=[f"{w or 'top'}.{n}" for w, n, _b in NUMERIC])
def test_each_numeric_key_refuses_what_is_out_of_range(tmp_path: Path, where: str, name: str,
                                                       bound: Bound) -> None:
    path = tmp_path / "gpufleet.yaml"
    for text, value in VALUES:
        shown = f"[{text}]" if bound.many else text
        yaml, line, key = _place(where, name, shown)
        err = _load(path, yaml)
        whole = bound.kind != "integer" or "." not in text  # 1.0e+20 is no integer, whatever its size
        in_range = value is not None and bound.contains(value) and whole
        if in_range:
            assert err is None, f"{key}: {text} is in range {bound.describe()} but was refused: {err}"
            continue
        assert err is not None, f"{key}: {text} is outside {bound.describe()} but was accepted"
        want = f"{key}[0]" if bound.many else key
        assert [(e.path, e.line, e.key) for e in err.errors] == [(str(path), line, want)], str(err)
        place = f"{path}:{line}: {want}: "
        assert str(err.errors[0]).startswith(place) and len(str(err.errors[0])) > len(place)


@pytest.mark.parametrize("where", list(SECTIONS))
def test_no_other_key_takes_a_number(tmp_path: Path, where: str) -> None:
    """Every key that is not in the walk refuses a bare number: no numeric key escapes the table."""
    path = tmp_path / "gpufleet.yaml"
    template = _place(where, "x", "1")[0]
    for name, conv in SECTIONS[where].items():
        if isinstance(conv, Bound) or f" {name}: " in template or f"- {name}: " in template:
            continue  # a number (above), or a key the surrounding entry itself sets (name, kind, ...)
        yaml, line, key = _place(where, name, "100000000000000000000")
        err = _load(path, yaml)
        assert err is not None and (line, key) in [(e.line, e.key) for e in err.errors], (key, err)


def test_top_level_keys_are_sections_or_bounded_or_not_numbers(tmp_path: Path) -> None:
    roots = {w.split(".")[0].removesuffix("[]") for w in SECTIONS if w}
    for name in TOP_KEYS:
        if name in roots or name in SECTIONS[""]:
            continue
        err = _load(tmp_path / "gpufleet.yaml", f"{name}: 100000000000000000000\n")
        assert err is not None and err.errors[0].key == name and err.errors[0].line == 1, (name, err)


def test_every_rule_default_is_inside_its_range() -> None:
    for rule, params in DEFAULT_RULES.items():
        for name, default in params.items():
            conv = SECTIONS[f"rules.{rule}"][name]
            if isinstance(conv, Bound):
                for value in default if conv.many else [default]:
                    assert conv.contains(value), (rule, name, default, conv.describe())


def test_operator_guide_lists_every_range() -> None:
    assert ranges_table() in OPERATOR.read_text(), "regenerate OPERATOR.md section 9 from ranges_table()"


def _every_key_at_once(text: str) -> tuple[str, set[tuple[int, str]]]:
    """One file setting every numeric key to ``text``; and the (line, key) each error should name."""
    lines: list[str] = []
    expected: set[tuple[int, str]] = set()
    by_section: dict[str, list[tuple[str, Bound]]] = {}
    for where, name, bound in NUMERIC:
        by_section.setdefault(where, []).append((name, bound))
    for where in sorted(by_section, key=lambda w: (w.split(".")[0], w)):  # a parent's children follow it
        head = _place(where, "NAME", "V")
        parents = head[0].splitlines()[:-1]
        if parents and parents[0] in lines:
            parents = parents[1:]  # "defaults:", "rules:": one mapping, written once
        lines.extend(parents)
        indent = head[0].splitlines()[-1].split("NAME")[0]
        for name, bound in by_section[where]:
            lines.append(f"{indent}{name}: {f'[{text}]' if bound.many else text}")
            expected.add((len(lines), head[2].replace("NAME", name) + ("[0]" if bound.many else "")))
    return "\n".join(lines) + "\n", expected


def test_config_check_names_file_line_and_key_for_every_key_at_once(tmp_path: Path) -> None:
    """The real command, the issue's value in every numeric key of one file: one error per key."""
    text, expected = _every_key_at_once("100000000000000000000")
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(text)
    gpufleet = Path(sys.executable).parent / "gpufleet"
    r = subprocess.run([str(gpufleet), "config", "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, check=False)
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    *errors, summary = r.stderr.splitlines()
    got = set()
    for e in errors:
        assert e.startswith(f"{cfg}:"), e
        line_s, key, _reason = e[len(f"{cfg}:"):].split(": ", 2)
        got.add((int(line_s), key))
    assert got == expected, (sorted(expected - got)[:5], sorted(got - expected)[:5])
    assert summary == f"gpufleet: {cfg}: {len(expected)} errors"
