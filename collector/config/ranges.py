"""Every numeric config key with its range, found by walking the specs the parser itself uses (no list kept
by hand): what deploy/OPERATOR.md's table shows and tests/config/test_ranges.py feeds absurd values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpufleet.collector.config.bounds import Bound
from gpufleet.collector.config.hosts import BUDGET_SPEC, HOST_ENTRY_SPEC, HOST_SPEC
from gpufleet.collector.config.nodes import Conv
from gpufleet.collector.config.sections import (
    ALERTING_SPEC,
    API_SPEC,
    COLLECTOR_SPEC,
    METRICS_SPEC,
    NOTIFIER_SPEC,
    RULE_SPECS,
    STORAGE_SPEC,
    TOP_SPEC,
    WEB_SPEC,
)

#: Each mapping of keys by where it sits in the file ("": the top level; "[]": every item of a list).
SECTIONS: Final[dict[str, Mapping[str, Conv]]] = {
    "": TOP_SPEC,
    "defaults": HOST_SPEC,
    "hosts[]": HOST_ENTRY_SPEC,
    "defaults.budget": BUDGET_SPEC,
    "storage": STORAGE_SPEC,
    "notifiers[]": NOTIFIER_SPEC,
    "alerting": ALERTING_SPEC,
    "api": API_SPEC,
    "metrics": METRICS_SPEC,
    "web": WEB_SPEC,
    "collectors[]": COLLECTOR_SPEC,
    **{f"rules.{name}": spec for name, spec in RULE_SPECS.items()},
}


def numeric_keys() -> list[tuple[str, str, Bound]]:
    """(section, key, bound) for every numeric key, in file order."""
    return [(where, name, conv) for where, spec in SECTIONS.items() for name, conv in spec.items()
            if isinstance(conv, Bound)]


def ranges_table() -> str:
    """The Markdown table of deploy/OPERATOR.md: a host's keys once (``defaults`` and each host take
    them), a rule parameter once with the rules that take it."""
    rows: list[tuple[str, str]] = []
    by_param: dict[str, tuple[Bound, list[str]]] = {}
    for where, name, bound in numeric_keys():
        if where == "hosts[]":
            continue
        if where.startswith("rules."):
            rule = where.removeprefix("rules.")
            by_param.setdefault(name, (bound, []))[1].append(rule)
            continue
        key = f"{where}.{name}" if where else name
        if where in ("defaults", "defaults.budget"):
            key += " (and each host's)"
        rows.append((key, bound.describe()))
    for name, (bound, rules) in by_param.items():
        which = "every rule" if len(rules) == len(RULE_SPECS) else ", ".join(rules)
        rows.append((f"rules.<rule>.{name} ({which})", bound.describe()))
    lines = ["| key | range |", "| --- | --- |"]
    lines += [f"| `{key.split(' ')[0]}`{key[len(key.split(' ')[0]):]} | {text} |" for key, text in rows]
    return "\n".join(lines) + "\n"
