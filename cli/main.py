"""The ``gpufleet`` command: status, top, history, alerts, hosts, report, jobs, silences, demo, collector,
config.

Only click and this module load at start; a command's module loads when that command runs (``COMMANDS``),
so ``gpufleet status`` reads no YAML, imports no rich and no store unless it needs them. Every error a user
can cause ends as one line ``gpufleet: ...`` on stderr. Exit codes: 0 ok, 1 runtime error, 2 usage error, 3
collector not reachable and no stored data, 4 permission denied (the socket's mode, or the collector's
api.group / api.admins).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import click
from gpufleet.cli.client import EXIT_RUNTIME, CliError
from gpufleet.cli.options import State, stderr_line, where_options
from gpufleet.collector.errors import CollectorError

#: command -> "module:attribute" of its click command, loaded when the command runs
COMMANDS: dict[str, str] = {
    "status": "gpufleet.cli.status:status",
    "top": "gpufleet.cli.top:top",
    "hosts": "gpufleet.cli.tables:hosts",
    "history": "gpufleet.cli.tables:history",
    "alerts": "gpufleet.cli.tables:alerts",
    "report": "gpufleet.cli.tables:report",
    "jobs": "gpufleet.cli.tables:jobs",
    "silence": "gpufleet.cli.silences:silence",
    "maintenance": "gpufleet.cli.maintenance:maintenance",
    "demo": "gpufleet.cli.demo:demo",
    "collector": "gpufleet.cli.service:collector",
    "config": "gpufleet.cli.service:config",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when asked for (click's documented lazy-loading group)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, name = target.partition(":")
        command = vars(importlib.import_module(module))[name]
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@where_options
@click.version_option(package_name="gpufleet", prog_name="gpufleet")
def cli() -> None:
    """Watch a fleet of shared NVIDIA GPU hosts: who holds which GPU, waste, heat, faults, history.

    Start with `gpufleet demo` (a simulated fleet, no GPU needed).
    """


def main(argv: Sequence[str] | None = None, state: State | None = None) -> None:
    """Console entry point: run the group, turn every user-facing error into one line and an exit code.
    ``state``: the invocation's settings made beforehand (tests inject a resolver this way)."""
    code = 0
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="gpufleet", standalone_mode=False,
                 obj=state)
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
