"""``gpufleet maintenance start | stop | list``: let go of a host for a while (driver reset, MIG change,
upgrade) with its alerts muted; what it does on the collector is collector/fleet/maintenance.py's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import click
from gpufleet.cli.client import EXIT_USAGE, CliError
from gpufleet.cli.grid import Cell, Col, grid
from gpufleet.cli.options import State, pass_state, print_json, split_list, where_options
from gpufleet.cli.timeparse import fmt_ts, parse_duration
from gpufleet.collector.errors import QueryError
from gpufleet.collector.fleet.maintenance import DEFAULT_WINDOW, MAX_WINDOW_TEXT, check_comment, check_window
from gpufleet.collector.model.names import is_glob, natural_key
from gpufleet.collector.units import DurationError, fmt_duration


@click.group()
def maintenance() -> None:
    """Let go of hosts for a while: no agent on them, alerts muted (`maintenance start --host n3`)."""


def _window(text: str | None) -> float:
    """``--for`` in seconds (the collector's default when absent), checked before anything is sent."""
    if text is None:
        return DEFAULT_WINDOW
    try:
        seconds = parse_duration(text)
    except DurationError as exc:  # an absurd --for starts nothing
        raise CliError(f"bad --for {text!r}: {exc.reason}", EXIT_USAGE) from None
    if seconds is None or seconds <= 0:
        raise CliError(f"bad --for {text!r}: expected a duration like 30m, 2h, 1d", EXIT_USAGE)
    try:
        return check_window(seconds)
    except QueryError:
        raise CliError(f"bad --for {text!r}: maintenance lasts at most {MAX_WINDOW_TEXT}; take a host that "
                       "is away longer out of the config", EXIT_USAGE) from None


def _hosts(hosts: Sequence[str]) -> list[str]:
    names = split_list(hosts)
    if not names:
        raise CliError("which host? --host NAME (a glob like 'n*' or several: --host n1,n2)", EXIT_USAGE)
    return names


def _left_out(names: Sequence[str], rows: Sequence[dict[str, Any]], why: str) -> None:
    """Names no collector changed (shards each change their own hosts and pass over the others'): one line
    and exit 1, after the hosts that were changed are shown."""
    done = {r.get("host") for r in rows}
    missing = [n for n in names if not is_glob(n) and n not in done]
    if missing:
        raise CliError(f"not changed: {', '.join(missing)} ({why})")


@maintenance.command("start")
@where_options
@click.option("--host", "hosts", multiple=True, required=True, metavar="NAME",
              help="Host (glob ok; several: --host n1,n2 or repeat).")
@click.option("--for", "duration", default=None, metavar="DURATION",
              help="How long: 30m, 2h, 1d (default 1h, at most 7d). Starting again replaces the window.")
@click.option("--comment", required=True, help="Why (shown in status, hosts and the log).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def maintenance_start(state: State, hosts: tuple[str, ...], duration: str | None, comment: str,
                      as_json: bool) -> None:
    """End the hosts' agent sessions and do not reconnect until the window ends; mute their alerts."""
    seconds = _window(duration)
    try:
        comment = check_comment(comment)
    except QueryError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    names = _hosts(hosts)
    rows = state.backend(fallback=False).call("maintenance_start", host=names, duration=seconds,
                                              comment=comment)
    if as_json:
        print_json(rows)
    else:
        for r in rows:
            click.echo(f"{r['host']}: in maintenance until {fmt_ts(r['ends_at'])} ({fmt_duration(seconds)}): "
                       "agent session ended, no reconnect until then; "
                       f"alerts muted (silence {r.get('silence_id')})")
    _left_out(names, rows, "no collector watches it")


@maintenance.command("stop")
@where_options
@click.option("--host", "hosts", multiple=True, required=True, metavar="NAME",
              help="Host (glob ok; several: --host n1,n2 or repeat).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def maintenance_stop(state: State, hosts: tuple[str, ...], as_json: bool) -> None:
    """End the hosts' maintenance now: the collector reconnects at once and their alerts speak again."""
    names = _hosts(hosts)
    rows = state.backend(fallback=False).call("maintenance_stop", host=names)
    if as_json:
        print_json(rows)
    else:
        for r in rows:
            took = fmt_duration(max(0.0, r["ends_at"] - r["starts_at"]))
            click.echo(f"{r['host']}: maintenance ended after {took}; reconnecting now")
    _left_out(names, rows, "not in maintenance, or no collector watches it")


@maintenance.command("list")
@where_options
@click.option("--all", "include_ended", is_flag=True, help="Include windows that have ended.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def maintenance_list(state: State, include_ended: bool, as_json: bool) -> None:
    """Hosts in maintenance: since when, until when, by whom, why."""
    rows = state.backend().call("maintenance_list", include_ended=include_ended or None)
    if as_json:
        print_json(rows)
        return
    state.console.print(render_windows(rows, state.console.width, time.time()))


def render_windows(rows: Sequence[dict[str, Any]], width: int, now: float) -> Any:
    """The windows as a table (ending soonest first), or one dim line when there are none."""
    from rich.text import Text

    if not rows:
        return Text("no host is in maintenance", "dim")
    cols = [Col("HOST", shrink=True), Col("SINCE"), Col("ENDS"), Col("BY", shrink=True)]
    cells: list[list[Cell]] = []
    def order(r: dict[str, Any]) -> tuple[bool, float, list[Any]]:  # in force, ending soonest; then ended
        ended = r["ends_at"] <= now
        return ended, -r["ends_at"] if ended else r["ends_at"], natural_key(r["host"])

    for r in sorted(rows, key=order):
        ends = r["ends_at"]
        left = ((f"in {fmt_duration(ends - now)}", "bold") if ends > now
                else (f"ended {fmt_ts(ends)[5:16]}", "dim"))
        cells.append([(r["host"], "bold"), fmt_ts(r["starts_at"])[5:16], left, r.get("created_by") or "-",
                      r.get("comment") or ""])
    return grid(cols, cells, width, tail="COMMENT", tail_min=20)
