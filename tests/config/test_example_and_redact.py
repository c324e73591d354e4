"""deploy/gpufleet.yaml loads cleanly and tells the truth about defaults; mask_url() hides secrets in URLs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from gpufleet.collector.config import ConfigErrors, load_config
from gpufleet.collector.secrets import mask_url
from gpufleet.collector.settings import DEFAULT_RULES, AlertingConfig, Config, HostConfig, StorageConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "gpufleet.yaml"


def test_example_config_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "gpufleet_ed25519").write_text("key\n")
    (tmp_path / ".ssh" / "known_hosts").write_text("")
    env = {"GPUFLEET_SLACK_URL": "slack://T0/B0/XYZ", "GPUFLEET_WEBHOOK_TOKEN": "tok"}
    cfg = load_config(EXAMPLE, env=env)

    assert [h.name for h in cfg.hosts] == ["gpu01", "node01", "node02", "node03", "node04", "dgx.example",
                                           "edge-gpu"]
    assert cfg.host("node03").address == "node03.cluster.example"  # type: ignore[union-attr]
    assert cfg.host("node03").tags == ["gpu", "a100", "training"]  # type: ignore[union-attr]
    assert cfg.host("gpu01").key == str(tmp_path / ".ssh" / "gpufleet_ed25519")  # type: ignore[union-attr]
    assert {n.kind for n in cfg.notifiers} == {"apprise", "webhook", "alertmanager", "command"}
    assert cfg.notifiers[0].urls == ["slack://T0/B0/XYZ"]
    assert cfg.notifiers[1].headers == {"Authorization": "Bearer tok"}
    assert cfg.metrics.listen == "127.0.0.1:9835" and cfg.api.mode == 0o660

    # The example shows the defaults: what it says must be what the code does.
    for name, params in DEFAULT_RULES.items():
        assert cfg.rules[name].params == params and cfg.rules[name].enabled, name
    plain = cfg.host("gpu01")
    assert plain is not None
    default_host = HostConfig(name="gpu01", address="gpu01")
    for f in dataclasses.fields(HostConfig):
        if f.name not in ("user", "key", "known_hosts", "tags"):
            assert getattr(plain, f.name) == getattr(default_host, f.name), f.name
    assert cfg.storage == StorageConfig() and cfg.alerting == AlertingConfig()
    assert cfg.max_hosts == Config().max_hosts


def test_example_without_secrets_names_the_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigErrors) as info:
        load_config(EXAMPLE, env={})
    text = str(info.value)
    assert "GPUFLEET_SLACK_URL is not set" in text and "GPUFLEET_WEBHOOK_TOKEN is not set" in text
    assert "private key file not found" in text and "known_hosts file not found" in text


@pytest.mark.parametrize(("url", "hidden", "kept"), [
    ("https://user:hunter2@example.org/x", ["hunter2"], ["user:***@example.org/x"]),
    ("https://api.example.org/v1?token=abc123&channel=gpu", ["abc123"], ["channel=gpu", "token=***"]),
    ("https://x.example/?api_key=K1&Password=P1&sig=S1", ["K1", "P1", "S1"], ["x.example"]),
    ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", ["XXXXSECRET", "B000"], ["hooks.slack.com"]),
    ("https://discord.com/api/webhooks/123/tokentoken", ["tokentoken"], ["discord.com"]),
    ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", ["TIiajkdnlazkcOXrIdevi7FQ", "A1BRTD4JD"],
     ["slack://"]),
    ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-1001234", ["AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"],
     ["tgram://"]),
    ("mailtos://gpufleet:mailpw@mail.example.org?to=ops@example.org", ["mailpw"], ["mail.example.org"]),
    ("json://127.0.0.1:9000/path", [], ["json://127.0.0.1:9000/path"]),
    ("https://ntfy.example/abcdefghij0123456789xyz", ["abcdefghij0123456789xyz"], ["ntfy.example"]),
])
def test_mask_url(url: str, hidden: list[str], kept: list[str]) -> None:
    out = mask_url(url)
    for secret in hidden:
        assert secret not in out
    for part in kept:
        assert part in out


def test_mask_url_odd_input() -> None:
    assert mask_url("") == ""
    assert mask_url("not a url with secret") == "***"
    assert mask_url("http://[::1:9000/x") == "***"
