"""A good config becomes the right dataclasses: values, durations, defaults + overrides, ranges, secrets."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.config import (
    default_config,
    expand_hostlist,
    load_config,
    parse_config,
    parse_duration,
)
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import DEFAULT_RULES, HostConfig, find_config

FULL = """
defaults:
  user: gpu
  port: 2200
  key: keys/id_ed25519
  known_hosts: kh
  interval: 2s
  connect_timeout: 1m
  keepalive_interval: 15
  read_timeout: 1h30m
  tags: [prod]
  agent_args: "--fake scenarios/busy.yaml --interval 0.5"
hosts:
  - n3
  - alice@n4.example:2222
  - name: node[01-03]
    address: 10.0.0.[1-3]
    tags: [a100, prod]
  - name: edge
    address: edge.example
    port: 22
    user: null
    jump: n3
    agent: upload
    host_key_policy: accept-new
    known_hosts: new_kh
    interval: 500ms
    read_timeout: null
    transport: ssh
  - {name: here, transport: local}
storage:
  path: data/gpufleet.db
  raw_retention: 2d
  batch_max_rows: 100
  batch_max_delay: 0.2
rules:
  wasted: {for: 45m, util_below: 10, power_idle_ratio: 1, exclude_users: [svc], hosts: ["node*"]}
  idle: false
  stale: {no_session_idle: 2h}
  overheating: {temp_at_least: 90, severity: warning, gpus: [0, 1]}
  xid: {warning_xids: [94, 31], hold: 90s}
  throttling: {enabled: false}
notifiers:
  - name: slack
    kind: apprise
    url: "${SLACK_URL}"
    urls: ["json://127.0.0.1:9000/x"]
    min_severity: warning
  - name: hook
    kind: webhook
    url: "https://hooks.example/${HOOK_PATH}"
    headers: {Authorization: "Bearer ${TOKEN}", X-Secret: "file:secret.txt", X-Env: "env:TOKEN"}
    timeout: 3s
    retries: 0
    rules: [wasted, xid]
    send_resolved: false
  - {name: am, kind: alertmanager, url: "http://127.0.0.1:9093"}
  - {name: page, kind: command, command: "/bin/page --to 'on call'"}
  - {name: page2, kind: command, command: [/bin/echo, "${TOKEN}"]}
alerting:
  group_by: [host]
  group_wait: 0
  repeat_interval: 1d
  notify_users: true
  user_email_domain: example.org
  user_emails: {bob: robert@example.org}
  user_notifier: "mailtos://gpufleet:${MAILPW}@mail.example.org"
api: {socket: run/gpufleet.sock, mode: "0660"}
metrics: {listen: "127.0.0.1:9835"}
"""

ENV = {"SLACK_URL": "slack://T0/B0/s3cr3t", "HOOK_PATH": "p/q", "TOKEN": "tok123", "MAILPW": "pw"}


@pytest.fixture
def full(tmp_path: Path, write: Any) -> Any:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519").write_text("key\n")
    (tmp_path / "kh").write_text("")
    (tmp_path / "secret.txt").write_text("  from-file  \nsecond line\n")
    return load_config(write(FULL), env=ENV)


def test_hosts_merge_defaults_overrides_and_ranges(full: Any, tmp_path: Path) -> None:
    names = [h.name for h in full.hosts]
    assert names == ["n3", "n4.example", "node01", "node02", "node03", "edge", "here"]
    n3 = full.host("n3")
    assert n3.address == "n3" and n3.user == "gpu" and n3.port == 2200
    assert n3.key == str(tmp_path / "keys" / "id_ed25519")  # relative to the config file
    assert n3.known_hosts == str(tmp_path / "kh")
    assert n3.interval == 2.0 and n3.connect_timeout == 60.0 and n3.keepalive_interval == 15.0
    assert n3.read_timeout == 5400.0 and n3.tags == ["prod"]
    assert n3.agent_args == ["--fake", "scenarios/busy.yaml", "--interval", "0.5"]  # agent's business
    n4 = full.host("n4.example")
    assert (n4.user, n4.port, n4.address) == ("alice", 2222, "n4.example")
    assert [(h.name, h.address) for h in full.hosts[2:5]] == [
        ("node01", "10.0.0.1"), ("node02", "10.0.0.2"), ("node03", "10.0.0.3")]
    assert full.host("node02").tags == ["prod", "a100"]  # defaults' tags kept, no duplicates
    edge = full.host("edge")
    assert edge.user is None and edge.port == 22 and edge.jump == "n3" and edge.agent == "upload"
    assert edge.host_key_policy == "accept-new" and edge.known_hosts == str(tmp_path / "new_kh")
    assert edge.interval == 0.5 and edge.read_timeout is None and edge.effective_read_timeout == 6.5
    assert full.host("here").transport == "local"


def test_sections(full: Any, tmp_path: Path) -> None:
    assert full.storage.path == str(tmp_path / "data" / "gpufleet.db")
    assert full.storage.raw_retention == 2 * 86400 and full.storage.batch_max_rows == 100
    assert full.storage.minute_retention == 30 * 86400.0  # default kept
    assert full.api.socket == str(tmp_path / "run" / "gpufleet.sock") and full.api.mode == 0o660
    assert full.metrics.listen == "127.0.0.1:9835"
    a = full.alerting
    assert a.group_by == ["host"] and a.group_wait == 0 and a.repeat_interval == 86400
    assert a.group_interval == 300.0 and a.user_emails == {"bob": "robert@example.org"}
    assert a.user_notifier == "mailtos://gpufleet:pw@mail.example.org"
    assert full.source.endswith("gpufleet.yaml")


def test_rules(full: Any) -> None:
    assert set(full.rules) == set(DEFAULT_RULES)
    wasted = full.rules["wasted"]
    assert wasted.enabled and wasted.for_seconds == 2700.0
    assert wasted.params["util_below"] == 10 and wasted.params["min_memory_mib"] == 256
    assert wasted.params["power_idle_ratio"] == 1.0 and isinstance(wasted.params["power_idle_ratio"], float)
    assert wasted.select.exclude_users == ["svc"] and wasted.select.hosts == ["node*"]
    assert not full.rules["idle"].enabled and not full.rules["throttling"].enabled
    assert full.rules["stale"].params["no_session_idle"] == 7200.0
    assert full.rules["overheating"].severity == "warning" and full.rules["overheating"].select.gpus == [0, 1]
    assert full.rules["xid"].params == {**DEFAULT_RULES["xid"], "warning_xids": [94, 31], "hold": 90.0}
    assert full.rules["ecc"].params == DEFAULT_RULES["ecc"]


def test_notifiers_and_secrets(full: Any) -> None:
    by = {n.name: n for n in full.notifiers}
    assert by["slack"].kind == "apprise" and by["slack"].urls == ["slack://T0/B0/s3cr3t", "json://127.0.0.1:9000/x"]
    assert by["slack"].min_severity == "warning"
    hook = by["hook"]
    assert hook.urls == ["https://hooks.example/p/q"]
    assert hook.headers == {"Authorization": "Bearer tok123", "X-Secret": "from-file", "X-Env": "tok123"}
    assert (hook.timeout, hook.retries, hook.rules, hook.send_resolved) == (3.0, 0, ["wasted", "xid"], False)
    assert by["am"].urls == ["http://127.0.0.1:9093"] and by["am"].timeout == 10.0
    assert by["page"].command == ["/bin/page", "--to", "on call"]
    assert by["page2"].command == ["/bin/echo", "tok123"]


def test_every_host_field_is_configurable() -> None:
    from gpufleet.collector.config import hosts
    fields = {f.name for f in dataclasses.fields(HostConfig)}
    assert set(hosts.HOST_ENTRY_SPEC) == fields
    assert set(hosts.HOST_SPEC) == fields - {"name", "address"}


def test_empty_and_minimal(load: Any) -> None:
    for text in ("", "# only a comment\n", "---\n"):
        cfg = load(text)
        assert cfg.hosts == [] and set(cfg.rules) == set(DEFAULT_RULES) and cfg.notifiers == []
    cfg = load("hosts: [a, b]\n")
    assert [(h.name, h.address, h.port, h.host_key_policy) for h in cfg.hosts] == [
        ("a", "a", 22, "strict"), ("b", "b", 22, "strict")]
    assert cfg.hosts[0].known_hosts is None and cfg.hosts[0].key is None


def test_env_default_escape_and_yaml_merge(load: Any) -> None:
    cfg = load("""
        hosts:
          - {name: a, user: "${U:-fallback}", agent_command: "$${LITERAL}", port: "${P}"}
        """, env={"P": "2201"})
    h = cfg.hosts[0]
    assert (h.user, h.agent_command, h.port) == ("fallback", "${LITERAL}", 2201)
    cfg = load("""
        hosts:
          - &one {name: a, user: ops, port: 2222}
          - {<<: *one, name: b, port: 2223}
        """)
    assert [(h.name, h.user, h.port) for h in cfg.hosts] == [("a", "ops", 2222), ("b", "ops", 2223)]


def test_ipv6_shorthand_and_octal_mode(load: Any) -> None:
    cfg = load("hosts: ['bob@[::1]:2022']\napi: {mode: 0640}\n")
    assert (cfg.hosts[0].name, cfg.hosts[0].address, cfg.hosts[0].port) == ("::1", "::1", 2022)
    assert cfg.api.mode == 0o640


def test_parse_config_string_and_base_dir(tmp_path: Path) -> None:
    cfg = parse_config("storage: {path: db.sqlite}\n", "inline.yaml", base_dir=tmp_path, env={})
    assert cfg.storage.path == str(tmp_path / "db.sqlite") and cfg.source == "inline.yaml"


@pytest.mark.parametrize(("text", "seconds"), [
    ("30m", 1800.0), ("2h", 7200.0), ("90s", 90.0), ("1d", 86400.0), ("1h30m", 5400.0), ("1h 30m", 5400.0),
    ("500ms", 0.5), ("1.5h", 5400.0), ("45", 45.0), (12, 12.0), (0.25, 0.25), ("1w", 604800.0),
])
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30 minutes", "", "1x", "-5m", -1, True, None, "5M", "m", "inf"])
def test_parse_duration_rejects(text: Any) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text, key="k")


def test_expand_hostlist() -> None:
    assert expand_hostlist("node[01-03]") == ["node01", "node02", "node03"]
    assert expand_hostlist("n[1,3,8-10]") == ["n1", "n3", "n8", "n9", "n10"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("plain") == ["plain"]
    for bad in ("n[3-1]", "n[a-b]", "n[1-2", "n[0-99999]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_default_config() -> None:
    cfg = default_config()
    assert [(h.name, h.transport) for h in cfg.hosts] == [(socket.gethostname(), "local")]
    assert set(cfg.rules) == set(DEFAULT_RULES)


def test_find_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GPUFLEET_CONFIG", str(tmp_path / "explicit.yaml"))
    assert find_config() == tmp_path / "explicit.yaml"  # even when missing: loading it says so
    monkeypatch.delenv("GPUFLEET_CONFIG")
    user = tmp_path / "home" / ".config" / "gpufleet" / "gpufleet.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    found = find_config()
    assert found == user or (found is not None and str(found).startswith("/etc/"))
    (tmp_path / "gpufleet.yaml").write_text("")
    assert find_config() == Path("gpufleet.yaml")


def test_resolve_secrets_false_for_clients(write: Any) -> None:
    path = write("""
        defaults: {key: /nonexistent/key}
        hosts: [a]
        notifiers: [{kind: apprise, url: "${UNSET_SECRET}"}, {name: f, kind: webhook, url: "file:/nope"}]
        api: {socket: /run/x.sock}
        """)
    cfg = load_config(path, env={}, resolve_secrets=False)
    assert cfg.api.socket == "/run/x.sock" and cfg.hosts[0].key == "/nonexistent/key"


def _tree(node: object) -> object:
    """A node tree as plain data: tag, value and line of every node."""
    import yaml

    assert isinstance(node, yaml.Node)
    if isinstance(node, yaml.MappingNode):
        value: object = [(_tree(k), _tree(v)) for k, v in node.value]
    elif isinstance(node, yaml.SequenceNode):
        value = [_tree(v) for v in node.value]
    else:
        value = node.value
    return (node.tag, value, node.start_mark.line, node.start_mark.column)


def test_the_fast_composer_gives_the_pure_python_tree() -> None:
    """config/__init__.py composes with libyaml when it can: the same nodes, tags and lines as SafeLoader,
    on the shipped example and on anchors, block scalars, flow collections and quoting."""
    import yaml
    from gpufleet.collector import config as config_module

    assert config_module._FAST_LOADER is not None, "PyYAML here is built with libyaml"
    example = (Path(__file__).resolve().parents[2] / "deploy" / "gpufleet.yaml").read_text()
    tricky = ('defaults: &d {interval: 2s, tags: [a, "b c"]}\nhosts:\n  - name: n1\n    <<: *d\n'
              '  - {name: "n2", port: 0x16}\nnotes: |\n  two\n  lines\nquoted: \'it''s\'\nempty:\n')
    for text in (example, tricky):
        fast = yaml.compose(text, Loader=config_module._FAST_LOADER)
        slow = yaml.compose(text, Loader=yaml.SafeLoader)
        assert _tree(fast) == _tree(slow)

