"""The operator files in deploy/: Prometheus rules and config, Grafana dashboard, systemd unit, sysusers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpufleet.collector.faces.metrics.exporter import METRIC_NAMES

from tests.metrics.metrics_testkit import DEPLOY, run_promtool

NAME = re.compile(r"\bgpufleet_[a-zA-Z0-9_]+")


# ------------------------------------------------------------------------------------ prometheus


def test_alert_rules_pass_promtool_check(promtool: str) -> None:
    res = run_promtool(promtool, "check", "rules", str(DEPLOY / "alerts.rules.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_alert_rules_unit_tests(promtool: str) -> None:
    res = run_promtool(promtool, "test", "rules", "tests/metrics/alerts_test.yml")
    assert res.returncode == 0, res.stdout + res.stderr


def test_example_prometheus_config_is_valid(promtool: str) -> None:
    res = run_promtool(promtool, "check", "config", str(DEPLOY / "prometheus.yml"))
    assert res.returncode == 0, res.stdout + res.stderr


def test_example_prometheus_config_labels_each_collector() -> None:
    """Several collectors are told apart by the target labels the dashboard and rules dedupe over."""
    (job,) = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"]
    assert job["honor_labels"] is True  # the collector's own host/gpu (and collector_info's) labels win
    for static in job["static_configs"]:
        assert set(static["labels"]) == {"collector", "shard"}, static
    text = (DEPLOY / "prometheus.yml").read_text()
    assert text.count('shard: "1/2"') == 2 and text.count('shard: "2/2"') == 2  # the commented layout


def test_alert_rules_use_only_exposed_metrics() -> None:
    doc = yaml.safe_load((DEPLOY / "alerts.rules.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert len(rules) >= 5
    used = {n for r in rules for n in NAME.findall(r["expr"])}
    assert used and used <= METRIC_NAMES, used - METRIC_NAMES
    for r in rules:
        assert r["alert"].startswith("Gpufleet")
        assert r["labels"]["severity"] in {"info", "warning", "critical"}
        assert r["annotations"]["summary"]


# --------------------------------------------------------------------------------------- grafana


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    return doc


def test_dashboard_uses_a_datasource_variable() -> None:
    doc = dashboard()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    ds = [v for v in variables.values() if v["type"] == "datasource"]
    assert len(ds) == 1 and ds[0]["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": "${" + ds[0]["name"] + "}"}
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for p in panels:
        assert p["datasource"] == ref, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t.get("datasource", ref) == ref, p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == ref, v["name"]
    assert {"host", "user"} <= set(variables)


def test_dashboard_queries_reference_only_exposed_metrics() -> None:
    doc = dashboard()
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used - METRIC_NAMES == set()
    # the dashboard covers each area the issue names
    for wanted in ("gpufleet_gpu_utilization_percent", "gpufleet_gpu_memory_used_bytes",
                   "gpufleet_gpu_temperature_celsius", "gpufleet_gpu_power_watts", "gpufleet_gpu_wasted",
                   "gpufleet_host_up", "gpufleet_alerts", "gpufleet_user_gpus",
                   "gpufleet_collector_frames_total", "gpufleet_collector_lag_seconds",
                   "gpufleet_collector_reconnects_total", "gpufleet_collector_store_queue_depth"):
        assert wanted in used, wanted


def test_dashboard_layout_is_sane() -> None:
    doc = dashboard()
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    for p in doc["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]


# --------------------------------------------------------------------------------------- systemd


def unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Parse a unit file, keeping repeated keys (systemd allows them)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def test_collector_unit_is_hardened() -> None:
    svc = unit(DEPLOY / "gpufleet-collector.service")["Service"]

    def one(key: str) -> str:
        assert key in svc, key
        return svc[key][-1]

    assert one("User") == "gpufleet" and one("Group") == "gpufleet"
    exec_start = one("ExecStart").split()
    assert exec_start[0].startswith("/") and exec_start[0].endswith("/gpufleet")
    assert exec_start[1:] == ["collector", "run", "-c", "/etc/gpufleet/gpufleet.yaml"]
    assert one("Restart") == "on-failure"
    assert one("TimeoutStopSec")
    expected = {"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                "NoNewPrivileges": "yes", "StateDirectory": "gpufleet", "RuntimeDirectory": "gpufleet",
                "ConfigurationDirectory": "gpufleet",
                "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
                "ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
                "CapabilityBoundingSet": "", "SystemCallArchitectures": "native"}
    assert {k: one(k) for k in expected} == expected
    assert set(one("RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "@system-service" in svc["SystemCallFilter"]
    # nothing may be writable outside the state/runtime dirs
    assert "ReadWritePaths" not in svc
    install = unit(DEPLOY / "gpufleet-collector.service")["Install"]
    assert install["WantedBy"] == ["multi-user.target"]


def test_collector_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    # verify checks that ExecStart exists: point it at a stand-in executable, keep everything else
    fake = tmp_path / "bin" / "gpufleet"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    text = (DEPLOY / "gpufleet-collector.service").read_text()
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={fake}", text, flags=re.M)
    copy = tmp_path / "gpufleet-collector.service"
    copy.write_text(text)
    res = subprocess.run([analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True,
                         timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "Unknown" not in out and "Failed" not in out and "Invalid" not in out, out


def test_sysusers_file_is_valid(tmp_path: Path) -> None:
    sysusers = shutil.which("systemd-sysusers")
    if sysusers is None:
        pytest.skip("systemd-sysusers not installed")
    (tmp_path / "etc").mkdir()
    conf = str(DEPLOY / "gpufleet.sysusers.conf")
    res = subprocess.run([sysusers, "--dry-run", f"--root={tmp_path}", conf], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Creating user 'gpufleet'" in res.stdout + res.stderr
    assert not list((tmp_path / "etc").iterdir())  # dry run wrote nothing
    # its home is the unit's StateDirectory, so ~/.ssh/known_hosts is writable under ProtectSystem=strict
    line = next(ln for ln in (DEPLOY / "gpufleet.sysusers.conf").read_text().splitlines()
                if ln.startswith("u "))
    assert line.split()[-1] == "/var/lib/gpufleet"


# ----------------------------------------------------------------------------------------- docs


def test_operator_guide_mentions_only_files_that_exist() -> None:
    guide = (DEPLOY / "OPERATOR.md").read_text()
    referenced = set(re.findall(r"\bdeploy/[\w.\-]+", guide))
    assert {"deploy/gpufleet-collector.service", "deploy/grafana-dashboard.json",
            "deploy/alerts.rules.yml"} <= referenced
    # files other helpers write (gpufleet.yaml, authorized_keys.example) may land later; check ours
    ours = {p.name for p in DEPLOY.iterdir()} - {"gpufleet.yaml", "authorized_keys.example"}
    for ref in referenced:
        name = ref.split("/", 1)[1]
        if name not in ("gpufleet.yaml", "authorized_keys.example"):
            assert name in ours, ref
    # every metric name the guide quotes is real, and the guide's table lists every metric
    quoted = set(re.findall(r"`(gpufleet_[a-z0-9_]+)`", guide))
    assert quoted - METRIC_NAMES == set()
    assert METRIC_NAMES - quoted == set()


def _guide_commands() -> list[list[str]]:
    """Every `gpufleet ...` command line in the guide (code blocks and inline code), as tokens."""
    guide = (DEPLOY / "OPERATOR.md").read_text()
    code = [ln.strip() for ln in guide.splitlines() if ln.startswith("    ")]
    code += re.findall(r"`([^`\n]+)`", guide)
    out = []
    for text in code:
        toks = text.split()
        for i, tok in enumerate(toks):
            if tok.rsplit("/", 1)[-1] != "gpufleet" or (i and toks[i - 1].startswith("-")):
                continue  # e.g. sudo -u gpufleet ...
            cmd = []
            for t in toks[i + 1:]:
                if t in ("&&", "|", "||", ";") or t.startswith("#"):
                    break
                cmd.append(t)
            if cmd:  # a bare `gpufleet` is the user or a directory like /var/lib/gpufleet
                out.append(cmd)
    return out


def test_operator_guide_commands_exist() -> None:
    import click
    from gpufleet.cli.main import cli

    commands = _guide_commands()
    assert len(commands) >= 8 and ["config", "check", "-c", "/etc/gpufleet/gpufleet.yaml"] in commands
    for cmd in commands:
        node: click.Command = cli
        rest = list(cmd)
        while isinstance(node, click.Group) and rest and not rest[0].startswith("-"):
            sub = node.get_command(click.Context(node), rest[0])
            assert sub is not None, f"gpufleet {' '.join(cmd)}: no command {rest[0]!r}"
            node, rest = sub, rest[1:]
        assert not isinstance(node, click.Group), f"gpufleet {' '.join(cmd)}: incomplete command"
        opts = {o for p in node.params for o in (*p.opts, *p.secondary_opts)}
        for tok in rest:
            if tok.startswith("-"):
                assert tok.split("=", 1)[0] in opts, f"gpufleet {' '.join(cmd)}: no option {tok}"


def test_operator_guide_deploy_files_all_exist() -> None:
    guide = (DEPLOY / "OPERATOR.md").read_text()
    for ref in set(re.findall(r"\bdeploy/[\w.\-]+", guide)):
        assert (DEPLOY.parent / ref).is_file(), ref
