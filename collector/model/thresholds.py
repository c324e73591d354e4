"""The parameters of the one classification (collector/model/classify.py): the ``wasted``, ``idle`` and
``orphaned_memory`` rules' thresholds as a config sets them, the rule catalog's defaults under them.

Apart from the classification so a reader that only passes thresholds on (the CLI's read-only fallback)
does not load the sample types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.collector.rules import catalog
from gpufleet.collector.units import MIB

_WASTED, _IDLE, _ORPHANED = catalog.Wasted(), catalog.Idle(), catalog.OrphanedMemory()  # the defaults


@dataclass(slots=True, frozen=True)
class Thresholds:
    """The parameters of the one classification (the rules' config; the rule catalog's defaults)."""

    util_below: float = float(_WASTED.util_below)
    min_memory_bytes: int = _WASTED.min_memory_mib * MIB
    power_idle_ratio: float = _WASTED.power_idle_ratio
    stuck_power_ratio: float = _WASTED.stuck_power_ratio
    mem_busy_at_least: float = float(_WASTED.mem_busy_at_least)
    sm_active_at_least: float = float(_WASTED.sm_active_at_least)
    free_max_memory_bytes: int = _IDLE.max_memory_mib * MIB
    orphan_min_bytes: int = _ORPHANED.min_memory_mib * MIB

    @classmethod
    def from_rules(cls, params: Mapping[str, Mapping[str, Any] | None] | None = None) -> Thresholds:
        """From rule name -> configured params (missing rules and keys take the catalog's defaults)."""
        params = params or {}
        wasted = catalog.Wasted.of(params.get("wasted"))
        idle = catalog.Idle.of(params.get("idle"))
        orphaned = catalog.OrphanedMemory.of(params.get("orphaned_memory"))
        return cls(
            util_below=float(wasted.util_below),
            min_memory_bytes=int(wasted.min_memory_mib * MIB),
            power_idle_ratio=float(wasted.power_idle_ratio),
            stuck_power_ratio=float(wasted.stuck_power_ratio),
            mem_busy_at_least=float(wasted.mem_busy_at_least),
            sm_active_at_least=float(wasted.sm_active_at_least),
            free_max_memory_bytes=int(idle.max_memory_mib * MIB),
            orphan_min_bytes=int(orphaned.min_memory_mib * MIB),
        )


DEFAULT_THRESHOLDS = Thresholds()


def thresholds_of(rules: Mapping[str, Any]) -> Thresholds:
    """The thresholds a collector's config sets: rule name -> RuleConfig (``Config.rules``)."""
    return Thresholds.from_rules({name: rc.params for name, rc in rules.items()})
