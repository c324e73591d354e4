"""The one units module: durations (ms..w, bounded), sizes, percentages, as every caller reads them."""

from __future__ import annotations

import pytest
from gpufleet.cli.timeparse import TimeParseError, parse_time
from gpufleet.cli.timeparse import parse_duration as cli_duration
from gpufleet.collector.config import parse_config
from gpufleet.collector.config import parse_duration as config_duration
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.units import (
    MAX_DURATION,
    DurationError,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_size,
    fmt_size_short,
    parse_duration,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0), ("1w", 604800.0),
    ("1h30m", 5400.0), ("1h 30m", 5400.0), (".5h", 1800.0), ("45", 45.0), (12, 12.0), ("100w", 6048e4),
])
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [
    "999999999999999999999999999999w", "99999999999d", "5300w", 10**400, 4e9, "1" * 400 + "s",
])
def test_absurd_durations_are_refused_in_one_line(text: object) -> None:
    with pytest.raises(DurationError) as exc:
        parse_duration(text)
    assert "is too long (at most 100 years)" in str(exc.value) and "\n" not in str(exc.value)
    assert len(str(exc.value)) < 100 and not exc.value.syntax


def test_bound_is_about_a_century() -> None:
    assert 99 * 365 * 86400 < parse_duration("5200w") <= MAX_DURATION


@pytest.mark.parametrize("text", ["30 minutes", "", "1x", "-5m", -1, True, None, "5M", "m", "inf",
                                  float("inf"), float("nan")])
def test_not_durations(text: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_cli_and_config_read_the_same_grammar() -> None:
    """The CLI accepts ``ms`` now, like the config; both refuse the same absurd value."""
    assert cli_duration("500ms") == config_duration("500ms") == 0.5
    assert cli_duration("90M") == 5400  # the command line is case-blind
    assert cli_duration("45") is None  # a bare number is no duration on the command line
    with pytest.raises(DurationError):
        cli_duration("999999999999999999999999999999w")
    with pytest.raises(TimeParseError, match=r"^bad --since '9+w': duration .* is too long"):
        parse_time("999999999999999999999999999999w")


def test_config_keeps_file_line_context() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config("hosts:\n  - {name: a, transport: local,\n     interval: 99999999999d}\n", "g.yaml",
                     env={})
    assert str(exc.value) == ("g.yaml:3: hosts[a].interval: duration '99999999999d' is too long "
                              "(at most 100 years)")


def test_fmt_duration_one_format() -> None:
    assert [fmt_duration(s) for s in (5, 125, 3600, 3 * 3600 + 300, 2 * 86400, 2 * 86400 + 3 * 3600)] == [
        "5s", "2m", "1h00m", "3h05m", "2d00h", "2d03h"]
    assert fmt_duration(None) == "-" and fmt_duration(-5) == "0s" and fmt_duration(float("inf")) == "0s"


def test_sizes_and_percentages() -> None:
    assert [fmt_bytes(n) for n in (512, 12 << 10, 100 << 20, 40 << 30, 3 << 40, None)] == [
        "512 B", "12 KiB", "100.0 MiB", "40.0 GiB", "3.0 TiB", "?"]
    assert [fmt_size(n) for n in (512 << 20, int(1.5 * (1 << 30)), 40 << 30, None)] == [
        "512 MiB", "1.5 GiB", "40 GiB", "-"]
    assert [fmt_size_short(n) for n in (512 << 20, int(1.5 * (1 << 30)), 31 << 30)] == ["512M", "1.5G", "31G"]
    assert (fmt_pct(42.4), fmt_pct(7, compact=True), fmt_pct(None), fmt_pct(None, unknown="?")) == (
        "42 %", "7%", "-", "?")
