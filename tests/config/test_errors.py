"""Each kind of config mistake is reported with the right file, line and key, all of them at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.config import ConfigErrors, load_config, parse_config
from gpufleet.collector.errors import ConfigError


def only(errs: ConfigErrors) -> ConfigError:
    assert len(errs.errors) == 1, str(errs)
    return errs.errors[0]


def test_unknown_top_level_key(fail: Any) -> None:
    e = only(fail("hosts: [a]\nhots: [b]\n"))
    assert (e.line, e.key) == (2, "hots") and "did you mean 'hosts'" in e.reason
    assert str(e).endswith("gpufleet.yaml:2: hots: " + e.reason)


def test_unknown_host_key_with_suggestion(fail: Any) -> None:
    e = only(fail("""
        hosts:
          - name: n1
            prot: 2222
        """))
    assert (e.line, e.key) == (3, "hosts[n1].prot")
    assert "unknown key 'prot'" in e.reason and "did you mean 'port'?" in e.reason


def test_wrong_type(fail: Any) -> None:
    errs = fail("""
        defaults:
          port: "twenty-two"
          tags: prod
        hosts: [{name: a, keepalive_count_max: 1.5}]
        """)
    got = {(e.line, e.key): e.reason for e in errs.errors}
    assert "expected an integer, got a string" in got[(2, "defaults.port")]
    assert "expected a list" in got[(3, "defaults.tags")]
    assert "expected an integer, got a number" in got[(4, "hosts[a].keepalive_count_max")]


def test_bad_duration(fail: Any) -> None:
    e = only(fail("""
        hosts:
          - name: a
            interval: 30 minutes
        """))
    assert (e.line, e.key) == (3, "hosts[a].interval") and "bad duration '30 minutes'" in e.reason


def test_negative_and_zero_interval(fail: Any) -> None:
    errs = fail("defaults: {interval: -1}\nhosts: [{name: a, interval: 0}]\n")
    assert [(e.line, e.key) for e in errs.errors] == [(1, "defaults.interval"), (2, "hosts[a].interval")]
    assert "negative" in errs.errors[0].reason and "greater than 0" in errs.errors[1].reason


def test_max_concurrent_connects_is_a_positive_integer(fail: Any, load: Any) -> None:
    assert load("max_concurrent_connects: 8\nhosts: []\n").max_concurrent_connects == 8
    assert load("hosts: []\n").max_concurrent_connects == 32
    e = only(fail("hosts: []\nmax_concurrent_connects: 0\n"))
    assert (e.line, e.key) == (2, "max_concurrent_connects") and "at least 1" in e.reason


def test_missing_key_file(fail: Any, tmp_path: Path) -> None:
    errs = fail("""
        defaults:
          key: ~/nope/id_ed25519
        hosts:
          - a
          - b
          - {name: c, key: missing_key}
          - {name: d, transport: local}
        """)
    # Reported once where it is written, not once per host that inherits it.
    assert [(e.line, e.key) for e in errs.errors] == [(2, "defaults.key"), (6, "hosts[c].key")]
    assert str(tmp_path / "missing_key") in errs.errors[1].reason
    assert "private key file not found" in errs.errors[0].reason and "~" not in errs.errors[0].reason


def test_known_hosts_must_exist_unless_accept_new(fail: Any, load: Any, tmp_path: Path) -> None:
    e = only(fail("hosts: [{name: a, known_hosts: kh}]\n"))
    assert (e.line, e.key) == (1, "hosts[a].known_hosts") and "accept-new" in e.reason
    cfg = load("hosts: [{name: a, known_hosts: kh, host_key_policy: accept-new}]\n")
    assert cfg.hosts[0].known_hosts == str(tmp_path / "kh")


def test_duplicate_host_names_both_lines(fail: Any) -> None:
    e = only(fail("""
        hosts:
          - name: node01
          - node[01-02]
        """))
    assert (e.line, e.key) == (3, "hosts[node[01-02]]")
    assert "lines 2 and 3" in e.reason and "node01" in e.reason


@pytest.mark.parametrize("setting", [
    "host_key_policy: none", "host_key_policy: insecure", "host_key_policy: off", "host_key_policy: 'no'",
    "known_hosts: null", "known_hosts: none", "known_hosts: false", "known_hosts: /dev/null",
    "known_hosts: ''",
])
def test_disabled_verification_rejected(fail: Any, setting: str) -> None:
    e = only(fail(f"defaults:\n  {setting}\nhosts: [a]\n"))
    assert e.line == 2 and e.key == "defaults." + setting.split(":")[0]
    assert "disable host key verification" in e.reason and "always verifies" in e.reason


def test_bad_host_key_policy_word(fail: Any) -> None:
    e = only(fail("hosts: [{name: a, host_key_policy: accept_new}]\n"))
    assert "must be one of strict, accept-new" in e.reason and "did you mean 'accept-new'" in e.reason


def test_bad_notifier_kind(fail: Any) -> None:
    e = only(fail("""
        notifiers:
          - name: n
            kind: pagerduty
        """))
    assert (e.line, e.key) == (3, "notifiers[n].kind")
    assert "apprise, webhook, alertmanager, command" in e.reason


def test_notifier_shape(fail: Any) -> None:
    errs = fail("""
        notifiers:
          - {name: a, kind: webhook}
          - {name: b, kind: webhook, url: "ftp://x"}
          - {name: c, kind: command, url: "http://x"}
          - {name: d, kind: apprise, url: "json://x", headers: {A: b}}
          - {name: d, kind: alertmanager, url: "http://127.0.0.1:9093", rules: [wasted, wastd]}
        """)
    got = sorted((e.line or 0, e.key or "") for e in errs.errors)
    assert got == [(2, "notifiers[a]"), (3, "notifiers[b].url"), (4, "notifiers[c]"), (4, "notifiers[c].url"),
                   (5, "notifiers[d].headers"), (6, "notifiers[d].name"), (6, "notifiers[d].rules[1]")]


def test_unknown_rule_lists_valid(fail: Any) -> None:
    e = only(fail("rules:\n  wastd: {for: 1h}\n"))
    assert (e.line, e.key) == (2, "rules.wastd")
    assert "did you mean 'wasted'?" in e.reason and "overheating" in e.reason and "host_down" in e.reason


def test_unknown_rule_param(fail: Any) -> None:
    e = only(fail("""
        rules:
          wasted:
            for: 1h
            util_bellow: 3
        """))
    assert (e.line, e.key) == (4, "rules.wasted.util_bellow") and "did you mean 'util_below'?" in e.reason


def test_rule_param_types(fail: Any) -> None:
    errs = fail("""
        rules:
          wasted: {util_below: "low", for: "half an hour", severity: urgent}
          xid: {warning_xids: [94, x], hold: 1h}
          overheating: yes please
        """)
    got = {e.key: (e.line, e.reason) for e in errs.errors}
    assert set(got) == {"rules.wasted.util_below", "rules.wasted.for", "rules.wasted.severity",
                        "rules.xid.warning_xids[1]", "rules.overheating"}
    assert got["rules.wasted.for"][0] == 2 and "bad duration" in got["rules.wasted.for"][1]
    assert got["rules.xid.warning_xids[1]"][0] == 3


def test_missing_env_var_never_shows_secrets(fail: Any) -> None:
    errs = fail("""
        hosts: [{name: a, port: "${PORT}"}]
        notifiers:
          - name: hook
            kind: webhook
            url: "https://x.example/${HOOK_SECRET}"
            headers: {Authorization: "Bearer ${MISSING_TOKEN}"}
          - {name: p, kind: "${KIND}"}
        metrics: {listen: "${LISTEN}"}
        """, env={"HOOK_SECRET": "hunter2-very-secret", "PORT": "s3cr3t-port", "KIND": "k1nd-s3cret",
                  "LISTEN": "l1sten-s3cret"})
    text = str(errs)
    got = {(e.line, e.key) for e in errs.errors}
    assert got == {(1, "hosts[a].port"), (6, "notifiers[hook].headers.Authorization"),
                   (7, "notifiers[p].kind"), (8, "metrics.listen")}
    assert "environment variable MISSING_TOKEN is not set" in text
    for secret in ("hunter2", "s3cr3t-port", "k1nd-s3cret", "l1sten-s3cret"):
        assert secret not in text


def test_secret_file_errors(fail: Any, tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    errs = fail("""
        notifiers:
          - {name: a, kind: apprise, url: "file:nope.txt"}
          - {name: b, kind: apprise, url: "file:empty"}
        """)
    assert [(e.line, e.key) for e in errs.errors] == [(2, "notifiers[a].url"), (3, "notifiers[b].url")]
    assert "cannot read secret file" in errs.errors[0].reason and "is empty" in errs.errors[1].reason


def test_bad_indentation_is_said_in_plain_words(fail: Any) -> None:
    """Issue 36: a key indented one space too far gave PyYAML's "expected <block end>, but found '<block
    mapping start>'"; the line was right, the words were the parser's."""
    e = only(fail("hosts:\n  - name: n1\n   address: 10.0.0.1\n"))
    assert e.line == 3 and e.reason.startswith(
        "YAML syntax error: bad indentation: 'address: 10.0.0.1' (column 4) does not line up with the lines "
        "above it in its list or mapping"), e.reason
    e = only(fail("hosts:\n- name: n1\n    address: 1\n"))
    assert e.line == 3 and "bad indentation or an unquoted ': '" in e.reason and "(column 12)" in e.reason


def test_yaml_syntax_error_line(fail: Any) -> None:
    e = only(fail("hosts:\n  - name: a\n    port: [22\n  - b\n"))
    assert e.line is not None and e.line >= 3 and "YAML syntax error" in e.reason
    e = only(fail("hosts:\n  - name: a\n\tport: 22\n"))
    assert e.line == 3


def test_duplicate_yaml_key(fail: Any) -> None:
    e = only(fail("hosts:\n  - name: a\n    port: 22\n    port: 23\n"))
    assert (e.line, e.key) == (4, "hosts[a].port") and "first at line 3" in e.reason


def test_many_errors_together_in_file_order(fail: Any) -> None:
    errs = fail("""
        defaults:
          interval: soon
        hosts:
          - {name: a, prot: 1}
          - {nme: b}
        storage: {raw_retention: forever, batch_max_rows: 0}
        rules: {nope: {}}
        metrics: {listen: nowhere}
        api: {mode: 660}
        extra: 1
        """)
    assert [e.line for e in errs.errors] == [2, 4, 5, 5, 6, 6, 7, 8, 9, 10]
    lines = str(errs).splitlines()
    assert len(lines) == len(errs.errors) and all(": " in ln and "gpufleet.yaml:" in ln for ln in lines)
    assert (errs.line, errs.key) == (2, "defaults.interval")  # the first one, like a plain ConfigError
    assert isinstance(errs, ConfigError)


def test_host_shapes(fail: Any) -> None:
    errs = fail("""
        hosts:
          - {address: x}
          - name: "bad name"
          - name: n[5-1]
          - {name: "r[1-3]", address: "10.0.0.1"}
          - 42
          - {name: j1, jump: j2}
          - {name: j2, jump: j1}
        """)
    got = [(e.line, e.key) for e in errs.errors]
    assert got == [(2, "hosts[0]"), (3, "hosts[bad name].name"), (4, "hosts[n[5-1]].name"),
                   (5, "hosts[r[1-3]].address"), (6, "hosts[4]"), (7, "hosts[j1].jump"),
                   (8, "hosts[j2].jump")]


def test_not_a_mapping_and_unreadable(fail: Any, tmp_path: Path) -> None:
    e = only(fail("- just\n- a list\n"))
    assert e.line == 1 and "expected a mapping" in e.reason
    with pytest.raises(ConfigErrors) as info:
        load_config(tmp_path / "absent.yaml")
    assert info.value.path == str(tmp_path / "absent.yaml") and "cannot read config" in str(info.value)


def test_unsafe_yaml_tag_is_an_error() -> None:
    with pytest.raises(ConfigErrors) as info:
        parse_config("hosts:\n  - name: !!python/object/apply:os.system [echo hi]\n", "x.yaml", env={})
    assert info.value.line == 2


def test_notify_users_needs_a_way_to_mail(fail: Any) -> None:
    errs = fail("alerting:\n  notify_users: true\n")
    assert [(e.line, e.key) for e in errs.errors] == [(2, "alerting.notify_users")] * 2


def test_metrics_listen_accepts_only_what_the_metrics_server_can_bind(fail: Any, load: Any) -> None:
    """config check used to pass unbracketed or unbalanced IPv6 and an empty [] host, which the metrics
    server then refused (or, for [], bound on every interface) at start-up."""
    from gpufleet.collector.config import parse_listen

    for bad in ("::1:9835", "[::1:9835", "[]:9835", "127.0.0.1:+80", "127.0.0.1:0", "h:65536"):
        e = only(fail(f'metrics: {{listen: "{bad}"}}\n'))
        assert (e.line, e.key) == (1, "metrics.listen") and f"got '{bad}'" in e.reason
        if not bad.endswith(":0"):
            with pytest.raises(ConfigError):
                parse_listen(bad)
    assert load('metrics: {listen: "[::1]:9835"}\n').metrics.listen == "[::1]:9835"
