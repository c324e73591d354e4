"""Rule name -> implementation, and building the enabled rules from the config."""

from __future__ import annotations

from gpufleet.collector.errors import ConfigError
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.rules.base import Rule
from gpufleet.collector.rules.faults import EccRule, GpuLostRule, XidRule
from gpufleet.collector.rules.health import GpuHealthRule
from gpufleet.collector.rules.hosts import (
    ClockSkewRule,
    CollectorOverloadedRule,
    HostDownRule,
    NotifierDownRule,
    OverBudgetRule,
    StorageRule,
)
from gpufleet.collector.rules.identity import DuplicateGpuRule
from gpufleet.collector.rules.patterns import InputBoundRule, NearOomRule, UnderusedRule
from gpufleet.collector.rules.peers import IdlePeersRule
from gpufleet.collector.rules.slurm import AllocatedUnusedRule
from gpufleet.collector.rules.thermal import OverheatingRule, ThrottlingRule
from gpufleet.collector.rules.usage import IdleRule, OrphanedMemoryRule, StaleRule, WastedRule
from gpufleet.collector.settings import DEFAULT_RULES, RuleConfig

RULE_TYPES: dict[str, type[Rule]] = {
    cls.name: cls
    for cls in (WastedRule, IdleRule, StaleRule, OrphanedMemoryRule, OverheatingRule, ThrottlingRule,
                GpuLostRule, XidRule, EccRule, GpuHealthRule, HostDownRule, StorageRule, DuplicateGpuRule,
                NotifierDownRule, CollectorOverloadedRule, UnderusedRule, InputBoundRule, IdlePeersRule,
                NearOomRule, ClockSkewRule, OverBudgetRule, AllocatedUnusedRule)
}

assert set(RULE_TYPES) == set(DEFAULT_RULES), "every default rule needs an implementation"


def build_rules(configs: dict[str, RuleConfig], thresholds: Thresholds | None = None) -> dict[str, Rule]:
    """The enabled rules; a rule missing from ``configs`` runs with its defaults. ``thresholds``: the
    classification's as the configs set them (passed by a caller that shares the one object)."""
    unknown = set(configs) - set(RULE_TYPES)
    if unknown:
        raise ConfigError(f"unknown rule(s): {', '.join(sorted(unknown))}", key="rules")
    rules: dict[str, Rule] = {}
    # every rule classifies samples alike: the wasted/idle/orphaned_memory thresholds as configured
    fleet = thresholds or Thresholds.from_rules({name: cfg.params for name, cfg in configs.items()})
    for name, cls in RULE_TYPES.items():
        cfg = configs.get(name) or RuleConfig(name=name)
        if cfg.enabled:
            rule = rules[name] = cls(cfg)  # Rule.__init__ lays the configured params over DEFAULT_RULES
            rule.thresholds = fleet
    return rules
