"""The commands that answer with a table or a text: ``hosts``, ``history``, ``alerts``, ``report``, ``jobs``.

Each asks one op (of the collector, or of the database when it is down) and prints the answer as JSON or
through its renderer (rich).
"""

from __future__ import annotations

import time

import click
from gpufleet.cli.client import CliError
from gpufleet.cli.options import State, pass_state, print_json, time_range, where_options
from gpufleet.cli.render_alerts import render_alerts
from gpufleet.cli.render_history import history_csv, render_history
from gpufleet.cli.render_jobs import render_jobs
from gpufleet.cli.render_status import render_hosts
from gpufleet.collector.model.codec import host_info_from_dict

#: a range up to this long is drawn from raw samples, at most this many a GPU (2 a second for an hour)
RAW_RANGE = 3600.0
RAW_POINTS = 7200


@click.command()
@where_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def hosts(state: State, as_json: bool) -> None:
    """Every host: connection status, since when, agent and driver versions, tags."""
    rows = state.backend().call("hosts")
    if as_json:
        print_json(rows)
        return
    state.console.print(
        render_hosts([host_info_from_dict(r) for r in rows], state.console.width, time.time())
    )


# ------------------------------------------------------------------------------------------- history


@click.command()
@where_options
@click.option("--host", required=True, metavar="NAME", help="The host.")
@click.option("--gpu", type=int, default=None, metavar="INDEX", help="Only this GPU.")
@click.option("--since", default=None, metavar="WHEN",
              help="Start: 24h, -90m, '2h ago', yesterday, 08:00 or a date (default: 24h before --until).")
@click.option("--until", default=None, metavar="WHEN", help="End, the same forms and +1h (default now).")
@click.option("--user", default=None, help="Only this user's processes (and the GPUs they used).")
@click.option(
    "--max-points", type=click.IntRange(1, 10_000), default=None,
    help="Points per GPU [default: 500; for a range up to an hour, every raw sample (up to 7200)].",
)
@click.option("--csv", "as_csv", is_flag=True, help="Print the series as CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@pass_state
def history(
    state: State,
    host: str,
    gpu: int | None,
    since: str | None,
    until: str | None,
    user: str | None,
    max_points: int | None,
    as_csv: bool,
    as_json: bool,
) -> None:
    """Usage over time per GPU: util and memory sparklines, summary, the processes that ran.

    --since and --until read like journalctl's: 2h, -2h, '2h ago', +1h, today, yesterday, 08:00, a date;
    --until alone ends the default 24 h there."""
    start, end = time_range(since, until, "24h")
    if max_points is None:  # up to an hour: the raw samples (1 s), as the web page's hour (issue 36)
        max_points = RAW_POINTS if end - start <= RAW_RANGE else 500
    result = state.backend().call(
        "history", host=host, gpu=gpu, since=start, until=end, user=user, max_points=max_points
    )
    if as_json:
        print_json(result)
        return
    if as_csv:
        click.echo(history_csv(result), nl=False)
        return
    state.console.print(render_history(result, state.console.width))


# ------------------------------------------------------------------------------------------- alerts


@click.command()
@where_options
@click.option("--since", default=None, metavar="WHEN", help="Show alerts resolved since (default 24h).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def alerts(state: State, since: str | None, as_json: bool) -> None:
    """Active alerts, recently resolved ones, and silences."""
    start, _end = time_range(since, None, "24h")
    result = state.backend().call("alerts", since=start)
    if as_json:
        print_json(result)
        return
    state.console.print(render_alerts(result, state.console.width, time.time(), start))


# ------------------------------------------------------------------------------------------- report


@click.command()
@where_options
@click.option("--since", default=None, metavar="WHEN", help="Start (default 7d).")
@click.option("--until", default=None, metavar="WHEN", help="End (default now).")
@click.option("--host", default=None, metavar="NAME", help="Only this host.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True
)
@click.option("--send", is_flag=True, help="Also send it through the configured notifiers.")
@pass_state
def report(
    state: State, since: str | None, until: str | None, host: str | None, fmt: str, send: bool
) -> None:
    """Usage report: GPU-hours held, used and wasted per user, alerts, faults."""
    start, end = time_range(since, until, "7d")
    backend = state.backend(fallback=not send)
    result = backend.call("report", since=start, until=end, host=host, format=fmt, send=send or None)
    click.echo(str(result.get("text", "")).rstrip("\n"))
    sent: dict[str, str | None] | None = result.get("sent")
    if send and sent is not None:
        failed = {name: err for name, err in sent.items() if err}
        ok = [name for name, err in sent.items() if not err]
        if ok:
            click.echo(f"gpufleet: report sent via {', '.join(ok)}", err=True)
        if failed:
            raise CliError("report not delivered via " + "; ".join(f"{n}: {e}" for n, e in failed.items()))


# ------------------------------------------------------------------------------------------- jobs


@click.command()
@where_options
@click.option("--user", default=None, help="Only this user's jobs.")
@click.option("--since", default=None, metavar="WHEN", help="Jobs that ended since (default 7d).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def jobs(state: State, user: str | None, since: str | None, as_json: bool) -> None:
    """Finished jobs: GPUs held, GPU-hours, mean and peak util, peak memory, waste, diagnoses."""
    start, end = time_range(since, None, "7d")
    result = state.backend().call("jobs", since=start, until=end, user=user)
    if as_json:
        print_json(result)
        return
    state.console.print(render_jobs(result, state.console.width))
