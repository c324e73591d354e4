"""What every ``gpufleet`` command shares: the per-invocation State (where the collector is), the options that
say where (``-c``, ``--socket``, ``--db``, ``--collector``) on the group and on each command, and the small
output and argument helpers (one place, so every command prints JSON and parses ranges the same way)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from gpufleet.cli.client import EXIT_USAGE, ApiError, Backend, CliError
from gpufleet.cli.connect import Endpoints, connect
from gpufleet.cli.lines import UNBOUNDED, output_width
from gpufleet.cli.timeparse import parse_range
from gpufleet.collector.addresses import Resolver
from gpufleet.collector.model.codec import ROWS_FORM, USERS_FORM, fleet_view_from_dict, user_usage_from_dict
from gpufleet.collector.model.summary import by_user
from gpufleet.collector.model.views import FleetView, UserUsage

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


class State:
    """Per-invocation settings shared by the group and its commands. ``resolver`` looks host names up for
    ``config check`` (None: the system's, collector/config/hosts.py; tests give their own)."""

    def __init__(self, resolver: Resolver | None = None) -> None:
        self.resolver = resolver
        self.width: int | None = None  # --width: lay out for this many columns
        self.ends = Endpoints(
            socket=os.environ.get("GPUFLEET_SOCKET") or None, db=os.environ.get("GPUFLEET_DB") or None,
            collectors=[c for c in os.environ.get("GPUFLEET_COLLECTORS", "").split(",") if c.strip()],
        )
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """rich's console, laid out for :meth:`out_width` (a pipe's: no limit, every line whole)."""
        if self._console is None:
            from rich.console import Console

            width = self.out_width()
            if width is None:
                width = UNBOUNDED
            elif self.width is None and sys.stdout.isatty():
                width = None  # rich follows the terminal (a watch screen resized)
            self._console = Console(highlight=False, width=width)
        return self._console

    def out_width(self) -> int | None:
        """Columns to lay stdout out for: ``--width``, else the terminal's; None into a pipe or a file."""
        return output_width(sys.stdout, self.width)

    def backend(self, *, fallback: bool = True) -> Backend:
        return connect(self.ends, fallback=fallback)


pass_state = click.make_pass_decorator(State, ensure=True)


def _set_endpoint(attr: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """The callback of ``--config`` / ``--socket`` / ``--db``: store the value on the shared Endpoints."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            setattr(ctx.ensure_object(State).ends, attr, value)
        return value

    return callback


def _set_width(ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None:
        ctx.ensure_object(State).width = value
    return value


def _add_collectors(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    if value:
        ctx.ensure_object(State).ends.collectors = list(value)
    return value


#: the options that say where the answers come from: (flags, metavar, the Endpoints field, help)
_WHERE: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("-c", "--config"), "FILE", "config_path",
     "gpufleet.yaml (default: $GPUFLEET_CONFIG, ./gpufleet.yaml, ~/.config/gpufleet/, /etc/gpufleet/)."),
    (("--socket",), "PATH", "socket", "The collector's query socket [env GPUFLEET_SOCKET]."),
    (("--db",), "PATH", "db", "SQLite history to read when the collector is down [env GPUFLEET_DB]."),
)


def where_options(f: F) -> F:
    """``-c/--config``, ``--socket``, ``--db``, ``--collector`` on the group *and* every command; and
    ``--width``, the columns the answer is laid out for."""
    f = click.option(
        "--width", type=click.IntRange(40, UNBOUNDED), metavar="COLUMNS", expose_value=False,
        callback=_set_width, is_eager=True,
        help="Lay the output out for this many columns (default: the terminal's; into a pipe or a file "
        "every line whole).",
    )(f)
    f = click.option(
        "--collector", metavar="WHERE", multiple=True, expose_value=False, callback=_add_collectors,
        is_eager=True,
        help="Ask this collector too (repeatable: shards, replicas), merged: a socket path or "
        "[user@]host[:port][/socket] over SSH [env GPUFLEET_COLLECTORS, comma-separated].",
    )(f)
    for flags, metavar, attr, text in reversed(_WHERE):  # click lists options in decoration order, reversed
        f = click.option(*flags, metavar=metavar, expose_value=False, callback=_set_endpoint(attr),
                         is_eager=True, help=text)(f)
    return f


def split_list(values: Sequence[str]) -> list[str]:
    """``--host n1,n2 --host n3`` -> [n1, n2, n3]."""
    return [v for item in values for v in item.split(",") if v]


def status_later(backend: Backend, args: dict[str, Any]) -> Callable[[], FleetView]:
    """The status model, asked for now and rebuilt when the returned call is made (the renderer's imports
    run in between). Several collectors' models are merged straight (no JSON round trip in between: half
    the time of a merged `status` at 2,000 hosts); one answer is rebuilt from its JSON."""
    return backend.status_later(**args)


def status_view(backend: Backend, args: dict[str, Any]) -> FleetView:
    return status_later(backend, args)()


def users_view(backend: Backend, args: dict[str, Any]) -> tuple[FleetView, list[UserUsage]]:
    """``status --by user``: the view's header and the per-user lines. One collector works them out itself
    (the ``users`` form: a few KB instead of the whole fleet); several collectors, or one too old for the
    form, send the fleet and the lines are made here from the merged view."""
    if not backend.merged:
        try:
            d = backend.call("status", **{**args, "form": USERS_FORM})
        except ApiError as exc:
            if "'form'" not in str(exc):  # an older collector names the argument it does not know
                raise
        else:
            if isinstance(d, dict) and d.get("form") == USERS_FORM:
                return fleet_view_from_dict(d["view"]), [user_usage_from_dict(u) for u in d["users"]]
    view = status_view(backend, {**args, "form": ROWS_FORM})
    return view, by_user(view)


def print_json(obj: Any) -> None:
    """Indented for a person at a terminal; compact into a pipe (indenting forces json's slow encoder)."""
    if sys.stdout.isatty():
        click.echo(json.dumps(obj, indent=2))
    else:
        click.echo(json.dumps(obj, separators=(",", ":")))


def time_range(since: str | None, until: str | None, default: str) -> tuple[float, float]:
    try:
        return parse_range(since, until, default_since=default)
    except ValueError as exc:  # TimeParseError, or since not before until
        raise CliError(str(exc), EXIT_USAGE) from None



def stderr_line(text: str) -> None:
    try:
        print(text, file=sys.stderr)
    except OSError:
        pass
