"""``gpufleet silence add | list | expire``: mute alerts that match labels for a while."""

from __future__ import annotations

import os
import time

import click
from gpufleet.cli.client import EXIT_USAGE, CliError
from gpufleet.cli.options import State, pass_state, print_json, stderr_line, where_options
from gpufleet.cli.render_alerts import render_silences
from gpufleet.cli.timeparse import fmt_ts, parse_duration
from gpufleet.collector.units import DurationError, fmt_duration


@click.group()
def silence() -> None:
    """Mute alerts that match labels for a while (`silence add --host n3 --rule wasted --for 2h`)."""


@silence.command("add")
@where_options
@click.option("--host", default=None, metavar="NAME", help="Host (glob ok).")
@click.option("--gpu", default=None, metavar="INDEX", help="GPU index.")
@click.option("--user", default=None, help="User whose alerts to mute.")
@click.option("--rule", default=None, help="Rule name (wasted, idle, stale, hot/overheating, ...).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Any other label matcher.")
@click.option("--for", "duration", required=True, metavar="DURATION", help="How long: 2h, 30m, 1d.")
@click.option("--comment", default="", help="Why (shown in `silence list`).")
@click.option("--by", "created_by", default=None, hidden=True, help="Ignored: the collector records who.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def silence_add(
    state: State,
    host: str | None,
    gpu: str | None,
    user: str | None,
    rule: str | None,
    labels: tuple[str, ...],
    duration: str,
    comment: str,
    created_by: str | None,
    as_json: bool,
) -> None:
    """Add a silence."""
    try:
        seconds = parse_duration(duration)
    except DurationError as exc:  # checked before anything is sent: an absurd --for creates nothing
        raise CliError(f"bad --for {duration!r}: {exc.reason}", EXIT_USAGE) from None
    if seconds is None or seconds <= 0:
        raise CliError(f"bad --for {duration!r}: expected a duration like 2h, 30m, 1d", EXIT_USAGE)
    matchers = {k: v for k, v in (("host", host), ("gpu", gpu), ("user", user), ("rule", rule)) if v}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CliError(f"bad --label {item!r}: expected KEY=VALUE", EXIT_USAGE)
        matchers[key] = value
    if not matchers:
        raise CliError("a silence needs at least one of --host, --gpu, --user, --rule, --label", EXIT_USAGE)
    who = created_by or os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    rec = state.backend(fallback=False).call(
        "silence_add", matchers=matchers, duration=seconds, comment=comment, created_by=who
    )
    if created_by and rec.get("created_by") != created_by:  # an older collector believes --by
        stderr_line(f"gpufleet: --by is ignored: the collector records who asked ({rec.get('created_by')})")
    if as_json:
        print_json(rec)
        return
    what = " ".join(f"{k}={v}" for k, v in sorted(rec["matchers"].items()))
    click.echo(f"silence {rec['id']}: {what} for {fmt_duration(seconds)} (until {fmt_ts(rec['ends_at'])})")


@silence.command("list")
@where_options
@click.option("--all", "include_expired", is_flag=True, help="Include expired silences.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def silence_list(state: State, include_expired: bool, as_json: bool) -> None:
    """List silences."""
    rows = state.backend().call("silence_list", include_expired=include_expired or None)
    if as_json:
        print_json(rows)
        return

    state.console.print(render_silences(rows, state.console.width, time.time()))


@silence.command("expire")
@where_options
@click.argument("silence_id", metavar="ID", type=int)
@pass_state
def silence_expire(state: State, silence_id: int) -> None:
    """End a silence now."""
    state.backend(fallback=False).call("silence_expire", id=silence_id)
    click.echo(f"silence {silence_id} expired")
