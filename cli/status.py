"""``gpufleet status``: the fleet now, as one screen (once, or ``--watch``), by user, or as the view model in
JSON.

The one-shot screen is the fast path: the request goes out first and the renderer is imported while the
collectors answer (the one import inside :func:`status`, for that reason); then plain lines are written,
with no rich at all.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from gpufleet.cli.client import EXIT_DENIED, EXIT_USAGE, ApiClient, CliError
from gpufleet.cli.keys import KeyReader
from gpufleet.cli.options import (
    State,
    pass_state,
    print_json,
    split_list,
    status_later,
    status_view,
    users_view,
    where_options,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


@click.command()
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
        # A one-shot pass that allocates ~100k objects and makes no reference cycles: the collections those
        # allocations would trigger find nothing to free and only cost time (~10 ms at 1,000 hosts).
        gc.disable()
        answer = status_later(backend, args)  # collectors at work while the renderer is imported
    from gpufleet.cli import render_status as screen  # after the request: imported while collectors answer

    if watch is None and by is None:
        screen.print_status(answer(), sys.stdout, state.width)
        return
    screen_height = state.console.height if sys.stdout.isatty() else None

    def frame(width: int) -> RenderableType:
        if by == "user":
            lines = users_view(backend, {k: v for k, v in args.items() if k != "form"})
            return screen.render_by_user(*lines, width)
        return screen.render_status(status_view(backend, args), width, height=screen_height)

    if watch is not None:
        if watch <= 0:
            raise CliError("--watch needs a positive number of seconds", EXIT_USAGE)
        if not sys.stdout.isatty():  # a file or a pipe: a whole status every interval, like vmstat 2
            watch_into(state.console, frame, watch)
            return
        watch_loop(state.console, frame, watch)
        return
    state.console.print(frame(state.console.width), overflow="crop", no_wrap=True)


def watch_into(console: Console, frame: Callable[[int], RenderableType], interval: float, *,
               count: int | None = None) -> None:
    """``--watch`` into a file or a pipe: a whole screen every ``interval`` (a blank line between them),
    flushed at once, until Ctrl-C or SIGTERM (or ``count`` screens); a collector that is restarting is
    said on its own line, and the watch goes on."""
    import signal

    def stop(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    shown = 0
    try:
        while count is None or shown < count:
            if shown:
                console.print()
            try:
                console.print(frame(console.width), overflow="crop", no_wrap=True)
            except CliError as exc:
                if exc.code == EXIT_DENIED:
                    raise
                console.print(f"gpufleet: {exc} (retrying every {interval:g} s)", markup=False)
            console.file.flush()
            shown += 1
            if count is None or shown < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def watch_loop(
    console: Console, frame: Callable[[int], RenderableType], interval: float, *, seconds: float | None = None
) -> None:
    """Redraw ``frame`` every ``interval`` on the alternate screen until ``q``, Esc, Ctrl-C (or
    ``seconds``)."""
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
