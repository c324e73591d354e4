"""``gpufleet collector run`` (the service in the foreground, or its workers' supervisor) and ``gpufleet
config check`` (every mistake in gpufleet.yaml as file:line: key: message, and what the config will run).

The config loader (yaml) loads with this module; the service itself only when ``collector run`` starts it.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import sys
from typing import Any

import click
from gpufleet.cli.client import EXIT_USAGE, CliError
from gpufleet.cli.hints import nvidia_driver_loaded, start_hint
from gpufleet.cli.options import State, pass_state, where_options
from gpufleet.cli.render_status import plural
from gpufleet.collector.config import default_config, load_config
from gpufleet.collector.config.hosts import system_resolver
from gpufleet.collector.config.split import select, worker_config
from gpufleet.collector.errors import CollectorError, ConfigError
from gpufleet.collector.service.workers import Supervisor
from gpufleet.collector.settings import Config
from gpufleet.collector.shards import parse_shard


@click.group()
def collector() -> None:
    """Run the collector service."""


def _shard_option(f: Any) -> Any:
    return click.option("--shard", default=None, metavar="I/N",
                        help="This collector's shard I of N (overrides the config's shard:).")(f)


def _apply_shard(config: Config, shard: str | None) -> Config:
    """The config restricted to its shard's hosts (``--shard`` over the config's ``shard:``)."""
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
    # A fatal signal inside SQLite (SIGBUS when its -shm file is truncated under it, SIGSEGV) otherwise ends
    # the process with no line in the journal: this prints the signal and every thread's stack to stderr.
    faulthandler.enable(all_threads=True)
    config = _load_config(state)
    who = ""
    if worker is not None:
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
    from gpufleet.collector.service import daemon  # the whole service: only for `collector run`

    try:
        asyncio.run(daemon.run_collector(config))
    except KeyboardInterrupt:
        pass
    except CollectorError as exc:
        raise CliError(str(exc)) from None


def _supervise(state: State, config: Config, log_level: str) -> None:
    """``workers: N``: this process starts and watches N ``collector run --worker I``
    (collector/service/workers.py)."""
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


def _load_config(state: State) -> Config:
    path = state.ends.config_file()
    if path is None:
        click.echo(
            "gpufleet: no config file found; watching this machine only (see `gpufleet config check`)",
            err=True,
        )
        if not nvidia_driver_loaded():
            click.echo(f"gpufleet: {start_hint()}", err=True)
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


@click.group()
def config() -> None:
    """Check the configuration."""


@config.command("check")
@where_options
@_shard_option
@pass_state
def config_check(state: State, shard: str | None) -> None:
    """Validate gpufleet.yaml; print every mistake as file:line: key: message."""
    path = state.ends.config_file()
    if path is None:
        click.echo(
            "no config file found ($GPUFLEET_CONFIG, ./gpufleet.yaml, ~/.config/gpufleet/gpufleet.yaml, "
            "/etc/gpufleet/gpufleet.yaml); the collector would watch this machine only"
        )
        return
    try:
        cfg = load_config(path, resolver=state.resolver or system_resolver)
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
    if cfg.collectors:
        click.echo(f"the CLI asks {plural(len(cfg.collectors), 'collector')} and merges them: "
                   + ", ".join(c.text for c in cfg.collectors))
    if cfg.workers > 1:
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
