"""One reader of secret references for the config loader and the notifiers (collector/secrets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpufleet.collector.config import parse_config
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.secrets import SecretError, read_secret, resolve_secret


def test_read_secret_forms(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("s3cr3t-value\nsecond line\n")
    assert read_secret("plain") == "plain"
    assert read_secret("env:TOK", env={"TOK": "v"}) == "v"
    assert read_secret(f"file:{tmp_path / 'tok'}") == "s3cr3t-value"
    assert read_secret(f"file://{tmp_path / 'tok'}") == "s3cr3t-value"
    assert read_secret("file:tok", base_dir=tmp_path) == "s3cr3t-value"
    (tmp_path / "empty").write_text("\n")
    for ref, why in (("env:NOPE", "environment variable NOPE is not set"),
                     (f"file:{tmp_path / 'empty'}", "is empty"),
                     (f"file:{tmp_path / 'gone'}", "cannot read")):
        with pytest.raises(SecretError, match=why):
            read_secret(ref, env={})


def test_config_and_notifiers_report_the_same_reason(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as built:
        resolve_secret(f"file:{tmp_path / 'gone'}", where="notifiers.a.urls[0]")
    assert built.value.key == "notifiers.a.urls[0]"
    text = f"notifiers:\n  - {{kind: webhook, url: 'file:{tmp_path / 'gone'}'}}\n"
    with pytest.raises(ConfigError) as loaded:
        parse_config(text, "g.yaml", env={})
    assert loaded.value.line == 2 and loaded.value.reason == built.value.reason
