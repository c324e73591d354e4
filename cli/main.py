"""The ``gpufleet`` command: status, top, history, alerts, hosts, report, jobs, silences, demo, collector,
config.

Only click and the socket client load at import; each command imports rich, the store or the collector when
it runs, so ``gpufleet status`` starts fast. Every error a user can cause ends as one line
``gpufleet: ...`` on stderr. Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 collector not reachable and
no stored data, 4 permission denied (the socket's mode, or the collector's api.group / api.admins).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from gpufleet.cli.client import (
    EXIT_DENIED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    ApiClient,
    CliError,
)
from gpufleet.cli.options import (
    State,
    pass_state,
    print_json,
    split_list,
    status_later,
    status_view,
    stderr_line,
    time_range,
    users_view,
    where_options,
)
from gpufleet.cli.silences import silence
from gpufleet.collector.errors import CollectorError

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

F = TypeVar("F", bound=Callable[..., Any])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@where_options
@click.version_option(package_name="gpufleet", prog_name="gpufleet")
def cli() -> None:
    """Watch a fleet of shared NVIDIA GPU hosts: who holds which GPU, waste, heat, faults, history.

    Start with `gpufleet demo` (a simulated fleet, no GPU needed).
    """


# ------------------------------------------------------------------------------------------- status


@cli.command()
@where_options
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="Only these hosts (repeat or comma-separate; globs like 'n*' work).",
)
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Only hosts with one of these tags.")
@click.option("--user", "users", multiple=True, metavar="USER", help="Only GPUs these users hold.")
@click.option("--by", type=click.Choice(["user"]), default=None, help="Group by user instead of by host.")
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Refresh every SECONDS (default 2) until q, Esc or Ctrl-C.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the view model as JSON.")
@pass_state
def status(
    state: State,
    hosts: tuple[str, ...],
    tags: tuple[str, ...],
    users: tuple[str, ...],
    by: str | None,
    watch: float | None,
    as_json: bool,
) -> None:
    """One screen for the fleet: every GPU's util, memory, temperature, holders and flags."""
    backend = state.backend()
    args: dict[str, Any] = {
        "host": split_list(hosts) or None,
        "tag": split_list(tags) or None,
        "user": split_list(users) or None,
    }
    if as_json:
        raw = getattr(sys.stdout, "buffer", None)
        if isinstance(backend, ApiClient) and raw is not None and not sys.stdout.isatty():
            # into a pipe: the compact JSON print_json would write is the collector's own bytes
            data = backend.call_compact("status", **args)
            sys.stdout.flush()
            raw.write(data + b"\n")
            return
        print_json(backend.call("status", **args))
        return

    # The screen asks for the compact rows form (an older collector ignores the argument and answers
    # objects, which fleet_view_from_dict reads as well); --json above keeps the public object form.
    args["form"] = "rows"
    if watch is None and by is None:  # the fast path: plain lines to stdout, no rich at all
        import gc

        # A one-shot pass that allocates ~100k objects and makes no reference cycles: the collections those
        # allocations would trigger find nothing to free and only cost time (~10 ms at 1,000 hosts).
        gc.disable()
        answer = status_later(backend, args)  # collectors at work while the renderer is imported

        from gpufleet.cli.lines import term_width, use_color, write_lines
        from gpufleet.cli.render_status import status_lines

        view = answer()
        write_lines(status_lines(view, term_width()), sys.stdout, color=use_color(sys.stdout))
        return

    def frame(width: int) -> RenderableType:
        from gpufleet.cli.render_status import render_by_user, render_status

        if by == "user":
            return render_by_user(*users_view(backend, {k: v for k, v in args.items() if k != "form"}), width)
        view = status_view(backend, args)
        return render_status(view, width, height=state.console.height)

    if watch is not None:
        if watch <= 0:
            raise CliError("--watch needs a positive number of seconds", EXIT_USAGE)
        watch_loop(state.console, frame, watch)
        return
    state.console.print(frame(state.console.width), overflow="crop", no_wrap=True)


def watch_loop(
    console: Console, frame: Callable[[int], RenderableType], interval: float, *, seconds: float | None = None
) -> None:
    """Redraw ``frame`` every ``interval`` on the alternate screen until ``q``, Esc, Ctrl-C (or
    ``seconds``)."""
    from gpufleet.cli.keys import KeyReader
    from rich.live import Live
    from rich.text import Text

    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        with KeyReader() as keys, Live(
            console=console, screen=True, auto_refresh=False, redirect_stderr=False
        ) as live:
            while deadline is None or time.monotonic() < deadline:
                try:
                    renderable: RenderableType = frame(console.width)
                except CliError as exc:  # collector restarting: keep watching
                    if exc.code == EXIT_DENIED:  # waiting will not help
                        raise
                    renderable = Text(f"gpufleet: {exc} (retrying every {interval:g} s)", style="yellow")
                live.update(renderable, refresh=True)
                until = time.monotonic() + (
                    interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
                )
                while (left := until - time.monotonic()) > 0:
                    key = keys.wait(left)
                    if key in ("q", "Q", "esc", "eof"):
                        return
                    if key == "resize":  # redraw for the new size now
                        break
    except KeyboardInterrupt:
        pass


@cli.command()
@where_options
@click.option("--host", "hosts", multiple=True, metavar="NAME", help="Only these hosts (globs work).")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Only hosts with one of these tags.")
@click.option("--user", "users", multiple=True, metavar="USER", help="Only GPUs these users hold.")
@click.option(
    "--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
    help="Seconds between refreshes.",
)
@pass_state
def top(
    state: State, hosts: tuple[str, ...], tags: tuple[str, ...], users: tuple[str, ...], interval: float
) -> None:
    """The fleet live and interactive: sort (h u m w o), filter (/), select a GPU (Enter) for its processes
    and history. q or Esc quits."""
    from gpufleet.cli.top import run_top

    args = {"host": split_list(hosts) or None, "tag": split_list(tags) or None,
            "user": split_list(users) or None}
    run_top(state.console, state.backend(), interval, args={k: v for k, v in args.items() if v})


# ------------------------------------------------------------------------------------------- hosts


@cli.command()
@where_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def hosts(state: State, as_json: bool) -> None:
    """Every host: connection status, since when, agent and driver versions, tags."""
    rows = state.backend().call("hosts")
    if as_json:
        print_json(rows)
        return
    from gpufleet.cli.render_status import render_hosts
    from gpufleet.collector.fleet.query import host_info_from_dict

    state.console.print(
        render_hosts([host_info_from_dict(r) for r in rows], state.console.width, time.time())
    )


# ------------------------------------------------------------------------------------------- history


@cli.command()
@where_options
@click.option("--host", required=True, metavar="NAME", help="The host.")
@click.option("--gpu", type=int, default=None, metavar="INDEX", help="Only this GPU.")
@click.option("--since", default=None, metavar="WHEN", help="Start: 24h, 7d, 90m or a date (default 24h).")
@click.option("--until", default=None, metavar="WHEN", help="End (default now).")
@click.option("--user", default=None, help="Only this user's processes (and the GPUs they used).")
@click.option(
    "--max-points", type=click.IntRange(1, 10_000), default=500, show_default=True, help="Points per GPU."
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
    max_points: int,
    as_csv: bool,
    as_json: bool,
) -> None:
    """Usage over time per GPU: util and memory sparklines, summary, the processes that ran."""
    start, end = time_range(since, until, "24h")
    result = state.backend().call(
        "history", host=host, gpu=gpu, since=start, until=end, user=user, max_points=max_points
    )
    if as_json:
        print_json(result)
        return
    if as_csv:
        from gpufleet.cli.render_history import history_csv

        click.echo(history_csv(result), nl=False)
        return
    from gpufleet.cli.render_history import render_history

    state.console.print(render_history(result, state.console.width))


# ------------------------------------------------------------------------------------------- alerts


@cli.command()
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
    from gpufleet.cli.render_alerts import render_alerts

    state.console.print(render_alerts(result, state.console.width, time.time(), start))


# ------------------------------------------------------------------------------------------- report


@cli.command()
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


@cli.command()
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
    from gpufleet.cli.render_jobs import render_jobs

    state.console.print(render_jobs(result, state.console.width))


cli.add_command(silence)


# ------------------------------------------------------------------------------------------- demo


@cli.command()
@click.option(
    "--seconds", type=click.FloatRange(min=1), default=None, help="Stop after this long (for tests)."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="Agent sampling interval.",
)
@click.option(
    "--refresh",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="Screen refresh interval.",
)
@click.option(
    "--no-screen", is_flag=True, help="Print a status snapshot now and then instead of a live screen."
)
@pass_state
def demo(state: State, seconds: float | None, interval: float, refresh: float, no_screen: bool) -> None:
    """Run a simulated fleet (fake GPUs behind real SSH on loopback) and show it live. Ctrl-C quits."""
    from gpufleet.cli.demo import run_demo

    run_demo(state.console, seconds=seconds, interval=interval, refresh=refresh, screen=not no_screen)


# ------------------------------------------------------------------------------------------- collector


@cli.group()
def collector() -> None:
    """Run the collector service."""


def _shard_option(f: Any) -> Any:
    return click.option("--shard", default=None, metavar="I/N",
                        help="This collector's shard I of N (overrides the config's shard:).")(f)


def _apply_shard(config: Any, shard: str | None) -> Any:
    """The config restricted to its shard's hosts (``--shard`` over the config's ``shard:``)."""
    from gpufleet.collector.shards import parse_shard, select

    try:
        chosen = parse_shard(shard) if shard is not None else config.shard
    except ValueError as exc:
        raise CliError(f"--shard: {exc}", EXIT_USAGE) from None
    return select(config, chosen)


@collector.command("run")
@where_options
@_shard_option
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
@click.option("--worker", type=int, default=None, hidden=True,
              help="Run worker I of the config's workers: (the supervisor starts them).")
@pass_state
def collector_run(state: State, shard: str | None, log_level: str, worker: int | None) -> None:
    """Run the collector in the foreground until SIGTERM / Ctrl-C (with workers: N, N worker processes)."""
    import asyncio
    import faulthandler
    import logging

    # A fatal signal inside SQLite (SIGBUS when its -shm file is truncated under it, SIGSEGV) otherwise ends
    # the process with no line in the journal: this prints the signal and every thread's stack to stderr.
    faulthandler.enable(all_threads=True)
    config = _load_config(state)
    who = ""
    if worker is not None:
        from gpufleet.collector.shards import worker_config

        if config.workers <= 1:
            raise CliError("--worker: this config runs no workers (workers: N, N > 1)", EXIT_USAGE)
        who = f"worker {worker}/{config.workers} "
        try:
            config = worker_config(config, worker)
        except ValueError as exc:
            raise CliError(f"--worker: {exc}", EXIT_USAGE) from None
    elif config.workers > 1:
        if shard is not None:
            raise CliError("--shard: this config runs workers (workers:), each a shard of it; drop one",
                           EXIT_USAGE)
        _supervise(state, config, log_level)
        return
    else:
        config = _apply_shard(config, shard)
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s {who}%(name)s: %(message)s"
    )
    from gpufleet.collector.errors import CollectorError
    from gpufleet.collector.service.daemon import run_collector

    try:
        asyncio.run(run_collector(config))
    except KeyboardInterrupt:
        pass
    except CollectorError as exc:
        raise CliError(str(exc)) from None


def _supervise(state: State, config: Any, log_level: str) -> None:
    """``workers: N``: this process starts and watches N ``collector run --worker I``
    (collector/service/workers.py)."""
    import asyncio
    import logging

    from gpufleet.collector.service.workers import Supervisor

    path = state.ends.config_file()
    assert path is not None, "workers come from a config file"
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s supervisor %(name)s: %(message)s")
    argv = [sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c", str(path.absolute()),
            "--log-level", log_level]
    supervisor = Supervisor(config.workers, lambda i: [*argv, "--worker", str(i)])
    logging.getLogger("gpufleet.collector.service.workers").info(
        "%d workers over %d hosts (%s)", config.workers, len(config.hosts), path)
    rc = asyncio.run(supervisor.run())
    if rc:
        raise CliError("a worker did not stop cleanly (its lines above say why)")


def _load_config(state: State) -> Any:
    from gpufleet.collector.config import default_config, load_config
    from gpufleet.collector.errors import ConfigError

    path = state.ends.config_file()
    if path is None:
        click.echo(
            "gpufleet: no config file found; watching this machine only (see `gpufleet config check`)",
            err=True,
        )
        return default_config()
    try:
        config = load_config(path)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            click.echo(line, err=True)
        raise CliError(f"{path}: invalid config", EXIT_USAGE) from None
    for warning in config.warnings:  # literal duplicates only: `config check` also resolves names
        click.echo(warning, err=True)
    return config


# ------------------------------------------------------------------------------------------- config


@cli.group()
def config() -> None:
    """Check the configuration."""


@config.command("check")
@where_options
@_shard_option
@pass_state
def config_check(state: State, shard: str | None) -> None:
    """Validate gpufleet.yaml; print every mistake as file:line: key: message."""
    from gpufleet.collector.config import load_config
    from gpufleet.collector.errors import ConfigError

    path = state.ends.config_file()
    if path is None:
        click.echo(
            "no config file found ($GPUFLEET_CONFIG, ./gpufleet.yaml, ~/.config/gpufleet/gpufleet.yaml, "
            "/etc/gpufleet/gpufleet.yaml); the collector would watch this machine only"
        )
        return
    try:
        cfg = load_config(path, resolve_addresses=True)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        for line in lines:
            click.echo(line, err=True)
        raise CliError(f"{path}: {len(lines)} error{'s' if len(lines) != 1 else ''}") from None
    for warning in cfg.warnings:
        click.echo(warning, err=True)
    everyone = len(cfg.hosts)
    cfg = _apply_shard(cfg, shard)
    if cfg.shard is not None:
        direct = [n.name for n in cfg.notifiers if n.kind != "alertmanager"]
        if direct:
            click.echo(f"{path}: warning: sharded collectors usually run in replica pairs, and each replica "
                       f"sends to notifiers {', '.join(direct)} itself (two pages per alert); send alerts "
                       "to an Alertmanager cluster instead, which deduplicates", err=True)
        click.echo(f"shard {cfg.shard}: {len(cfg.hosts)} of {everyone} hosts: "
                   + (", ".join(h.name for h in cfg.hosts) or "(none)"))
    from gpufleet.cli.render_status import plural

    if cfg.collectors:
        click.echo(f"the CLI asks {plural(len(cfg.collectors), 'collector')} and merges them: "
                   + ", ".join(c.text for c in cfg.collectors))
    if cfg.workers > 1:
        from gpufleet.collector.shards import worker_config

        for i in range(1, cfg.workers + 1):
            w = worker_config(cfg, i)
            click.echo(f"worker {i}/{cfg.workers}: {plural(len(w.hosts), 'host')}, socket "
                       f"{w.api.resolved_socket()}, database {w.storage.resolved_path()}"
                       + (f", metrics {w.metrics.listen}" if w.metrics.listen else ""))
    enabled = sum(1 for r in cfg.rules.values() if r.enabled)
    where = (f"{cfg.workers} workers (sockets and databases above)" if cfg.workers > 1 else
             f"socket {cfg.api.resolved_socket()}, database {cfg.storage.resolved_path()}")
    click.echo(
        f"{path}: ok: {plural(len(cfg.hosts), 'host')}, {plural(enabled, 'rule')} enabled, "
        f"{plural(len(cfg.notifiers), 'notifier')}; {where}"
    )


# ------------------------------------------------------------------------------------------- entry


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: run the group, turn every user-facing error into one line and an exit code."""
    code = 0
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="gpufleet", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.exceptions.Abort:
        code = 130
    except KeyboardInterrupt:
        code = 130
    except CliError as exc:
        stderr_line(f"gpufleet: {exc}")
        code = exc.code
    except CollectorError as exc:  # e.g. a malformed answer from a broken collector: one line, no traceback
        stderr_line(f"gpufleet: {exc}")
        code = EXIT_RUNTIME
    except BrokenPipeError:
        _quiet_stdout()
        code = 0
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    sys.exit(code)


def _quiet_stdout() -> None:
    """After `gpufleet status | head`: point stdout at /dev/null so the exit flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    main()
