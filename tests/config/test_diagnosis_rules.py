"""The diagnosis rules' parameters are validated from DEFAULT_RULES like every rule's: durations, types,
unknown keys with file:line. Nothing in the config package names them."""

from __future__ import annotations

from typing import Any

from gpufleet.collector.rules.registry import build_rules


def test_diagnosis_rules_load_with_durations_and_defaults(load: Any) -> None:
    cfg = load("""
        rules:
          underused: {util_below: 25, window: 45m, note_once_per: 12h}
          input_bound: {for: 5m, window: 90s, min_swings_per_minute: 6.0}
          idle_peers: {for: 2m, min_gpus: 3, exclude_users: [svc]}
          near_oom: {memory_at_least_pct: 97.5, severity: critical}
        """)
    r = cfg.rules
    assert r["underused"].params["window"] == 2700.0 and r["underused"].params["note_once_per"] == 43200.0
    assert r["underused"].severity == "info" and r["underused"].params["util_below"] == 25
    assert r["input_bound"].for_seconds == 300.0 and r["input_bound"].params["window"] == 90.0
    assert r["input_bound"].params["high_above"] == 70, "unset params keep their defaults"
    assert r["idle_peers"].params["min_gpus"] == 3 and r["idle_peers"].select.exclude_users == ["svc"]
    assert r["near_oom"].severity == "critical" and r["near_oom"].params["memory_at_least_pct"] == 97.5
    rules = build_rules(cfg.rules)
    assert rules["near_oom"].p.memory_at_least_pct == 97.5


def test_diagnosis_rule_mistakes_are_errors_with_file_line(fail: Any) -> None:
    errs = fail("""
        rules:
          input_bound:
            windw: 2m
          near_oom:
            memory_at_least_pct: lots
          underused:
            util_below: 130
          idle_peers:
            for: soon
        """)
    got = sorted((e.line or 0, e.key or "") for e in errs.errors)
    assert got == [(3, "rules.input_bound.windw"), (5, "rules.near_oom.memory_at_least_pct"),
                   (7, "rules.underused.util_below"), (9, "rules.idle_peers.for")]
    assert any("did you mean 'window'?" in e.reason for e in errs.errors)


def test_multi_signal_thresholds_load_and_reach_the_classification(load: Any, fail: Any) -> None:
    from gpufleet.collector.model.thresholds import thresholds_of

    cfg = load("""
        rules:
          wasted: {mem_busy_at_least: 25, sm_active_at_least: 0}
        """)
    t = thresholds_of(cfg.rules)
    assert (t.mem_busy_at_least, t.sm_active_at_least) == (25.0, 0.0)
    errs = fail("""
        rules:
          wasted:
            mem_busy_at_least: 101
            sm_active_at_least: -1
        """)
    got = sorted((e.line or 0, e.key or "") for e in errs.errors)
    assert got == [(3, "rules.wasted.mem_busy_at_least"), (4, "rules.wasted.sm_active_at_least")]


def test_job_notes_need_the_user_notifier(fail: Any) -> None:
    errs = fail("""
        alerting:
          job_notes: true
          job_notes_min_gpu_hours: -1
        """)
    got = sorted((e.line or 0, e.key or "") for e in errs.errors)
    assert got == [(2, "alerting.job_notes"), (3, "alerting.job_notes_min_gpu_hours")]
