"""The ``web:`` section: off by default on loopback, the token read like every other secret (``${ENV}``,
``env:``, ``file:``) and never echoed, mistakes reported with file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.collector.settings import DEFAULT_WEB_LISTEN


def test_defaults_off_on_loopback(load: Any) -> None:
    web = load("hosts: []\n").web
    assert (web.enabled, web.listen, web.token, web.show_commands) == (False, DEFAULT_WEB_LISTEN, None, True)
    assert DEFAULT_WEB_LISTEN.startswith("127.0.0.1:")
    web = load("web: {enabled: true}\n").web
    assert web.enabled and web.listen == DEFAULT_WEB_LISTEN


def test_token_from_env_and_file_never_in_repr(load: Any, tmp_path: Path) -> None:
    web = load('web: {enabled: true, token: "${WEB_TOKEN}"}\n', env={"WEB_TOKEN": "t0p-s3cret"}).web
    assert web.token == "t0p-s3cret" and "t0p-s3cret" not in repr(web)
    (tmp_path / "token").write_text("from-a-file\n")
    assert load("web: {token: file:token}\n").web.token == "from-a-file"
    assert load("web: {token: env:WT}\n", env={"WT": "via-env"}).web.token == "via-env"


def test_mistakes_have_file_line_and_hide_secrets(fail: Any) -> None:
    errs = fail("""
        web:
          enabled: yes please
          listen: nowhere
          token: "${NOT_SET}"
          show_commands: 3
          max_clients: 0
          tokn: x
        """)
    got = sorted((e.line, e.key) for e in errs.errors)
    assert got == [(2, "web.enabled"), (3, "web.listen"), (4, "web.token"), (5, "web.show_commands"),
                   (6, "web.max_clients"), (7, "web.tokn")]
    assert "did you mean 'token'" in str(errs)
    errs = fail('web: {token: file:missing}\n')
    assert [(e.line, e.key) for e in errs.errors] == [(1, "web.token")]


def test_wide_listen_without_token_warns(load: Any) -> None:
    cfg = load('web: {enabled: true, listen: "0.0.0.0:9836"}\n')
    assert len(cfg.warnings) == 1 and ":1: web.listen: warning:" in cfg.warnings[0]
    assert not load('web: {enabled: true, listen: "0.0.0.0:9836", token: x}\n').warnings
    assert not load('web: {enabled: true, listen: "[::1]:9836"}\n').warnings
