"""``gpufleet demo``: a whole simulated fleet on one machine with no GPU, shown live.

Six virtual hosts run the real agent on fake NVML scenarios behind real SSH servers on 127.0.0.1; the real
collector (started in-process on the bundled demo.yaml, with short rule durations) reaches them, stores
history in a temp directory and serves its query socket there. A pointer file in this user's runtime folder
(:func:`gpufleet.cli.connect.write_pointer`) names that socket while the demo runs, so plain
`gpufleet status`, `gpufleet alerts`, ... work from another terminal as typed when no collector serves the
default socket. Ctrl-C, ``q`` or Esc on the live screen (or ``--seconds``) stops everything cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml
from gpufleet.agent import scenarios
from gpufleet.cli.client import CliError
from gpufleet.cli.connect import clear_pointer, write_pointer
from gpufleet.cli.hints import start_hint
from gpufleet.cli.keys import KeyReader
from gpufleet.cli.options import State, pass_state
from gpufleet.cli.render_alerts import unplaced
from gpufleet.cli.render_status import fitted_lines, head_height, host_height, status_lines
from gpufleet.collector.config import parse_config
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.fleet.query import build_fleet_view
from gpufleet.collector.model.problems import problems
from gpufleet.collector.model.thresholds import thresholds_of
from gpufleet.collector.rules.catalog import SEVERITY_STYLES
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import Config
from gpufleet.collector.simfleet import SimFleet
from rich.console import Console, Group, RenderableType
from rich.text import Text

#: host name -> agent scenario (the names match the scenarios' own hostnames)
DEMO_HOSTS: dict[str, str] = {
    "gpu-node-01": "busy",
    "gpu-node-03": "wasting",
    "gpu-node-05": "zombie",
    "gpu-node-07": "hot",
    "gpu-node-09": "lost",
    "gpu-node-11": "idle",
    "gpu-node-13": "input_bound",
    "gpu-node-15": "ddp_idle_peers",
    "gpu-node-17": "near_oom",
    "gpu-node-19": "underused",
}
#: the full banner folds to one line after this many seconds of a live screen
FOLD_SECONDS = 12.0


def demo_config(workdir: Path) -> Config:
    """The bundled demo.yaml, with storage and the socket in ``workdir`` (hosts are added by the caller)."""
    text = resources.files("gpufleet.cli").joinpath("demo.yaml").read_text(encoding="utf-8")
    try:
        cfg = parse_config(text, "demo.yaml (bundled)", base_dir=workdir)
    except ConfigError as exc:  # a packaging mistake, not a user one: say exactly what
        raise CliError(f"bundled demo config is invalid: {exc}") from None
    cfg.storage.path = str(workdir / "gpufleet.db")
    cfg.api.socket = str(workdir / "gpufleet.sock")
    cfg.web.enabled, cfg.web.listen = True, "127.0.0.1:0"  # the banner shows the port it got
    return cfg


def _descriptions() -> dict[str, str]:
    """Each scenario's one-line description, from the scenario files themselves (so the banner never
    drifts from what the fake agents do)."""
    out = {}
    for host, name in DEMO_HOSTS.items():
        try:
            doc: Any = yaml.safe_load(scenarios.read(name))
            out[host] = str(doc.get("description") or name)
        except (KeyError, OSError, yaml.YAMLError, AttributeError):
            out[host] = name
    return out


def banner(socket: str, log_path: str, width: int | None) -> list[Text]:
    """The full introduction: what each simulated host does, and how to ask the collector."""
    lines = [
        Text.assemble(
            ("gpufleet demo", "bold cyan"),
            f": {len(DEMO_HOSTS)} simulated GPU hosts, fake NVML behind real SSH on 127.0.0.1 "
            "(no GPU needed)",
        )
    ]
    pad = max(map(len, DEMO_HOSTS.values())) + 1
    for host, text in _descriptions().items():
        name = DEMO_HOSTS[host]
        lines.append(Text.assemble("  ", (f"{host:<12}", "bold"), f"{name:<{pad}}", (text, "dim")))
    lines.append(
        Text("  Alerts appear within 5-90 s. From another terminal, as typed (no --socket needed):", "dim")
    )
    lines.append(Text.assemble("    ", ("gpufleet top", "bold"), "   ", ("gpufleet alerts", "bold"),
                               (f"   (socket {socket})", "dim")))
    lines.append(Text(f"  Collector log: {log_path}   q or Ctrl-C quits.", style="dim"))
    if width is not None:  # a pipe gets them whole
        for t in lines:
            t.truncate(width, overflow="ellipsis")
    return lines


def folded_banner(width: int, url: str | None = None) -> Text:
    """The banner once the first seconds are over, or when the screen has no room for it: one line, the
    longest form that fits. Every form names the web page (issue 36: at 80x24 it was never shown) and a
    command to try; at 60 columns the command gives way to the page's address, never the other way."""
    page = [("page ", "dim"), (url, "bold")] if url else []
    hosts = f" · {len(DEMO_HOSTS)} simulated hosts"
    sep = [(" · ", "dim")] if page else []
    forms = [
        [(hosts + " · ", "dim"), *page, *sep, ("another terminal: ", "dim"), ("gpufleet top", "bold"),
         (", ", "dim"), ("gpufleet alerts", "bold"), (" · q quits", "dim")],
        [(hosts + " · ", "dim"), *page, *sep, ("try ", "dim"), ("gpufleet top", "bold"),
         (" · q quits", "dim")],
        [(" · ", "dim"), *page, *sep, ("try ", "dim"), ("gpufleet top", "bold")],
        [(" · ", "dim"), *page] if page else [(" · try ", "dim"), ("gpufleet top", "bold")],
    ]
    for parts in forms:
        t = Text.assemble(("gpufleet demo", "bold cyan"), *parts)
        if t.cell_len <= width:
            return t
    t = Text.assemble(*(page or [("gpufleet top", "bold")]))  # the address alone, whole where it fits
    t.truncate(width, overflow="ellipsis")
    return t


def firing(collector: Collector) -> list[Any]:
    """Firing alerts (the screen groups them into problems, the worst first: collector/model/problems.py)."""
    return [a for a in collector.alerts.active() if a.state == "firing"]


def alert_lines(active: list[Any], width: int | None, rows: int | None = None) -> list[Text]:
    """The firing problems, one a line (a job's idle GPUs are one), the informational ones after them and
    not counted as firing, in at most ``rows`` lines (the last says how many more)."""
    items = problems(active)
    serious = [p for p in items if not p.info]
    info = [p for p in items if p.info]
    head = Text.assemble(("Firing alerts: ", "bold"), (str(len(serious)), "bold red" if serious else "green"))
    if info:
        head.append(f" · info: {len(info)}", "dim")
    lines = [head]
    ordered = serious + info
    room = len(ordered) if rows is None else max(rows - 1, 0)
    shown = ordered if len(ordered) <= room else ordered[: max(room - 1, 0)]
    pad = max((len(" ".join(p.flags)) for p in shown), default=0)
    for p in shown:
        flags = " ".join(p.flags)
        line = Text.assemble("  ", (f"{flags:<{pad}} ", SEVERITY_STYLES.get(p.severity, "")))
        lead = p.lead
        where = f"{p.hosts} GPU {p.gpus}" if p.gpus else p.hosts
        line.append(f"{where}: " if where else "", "bold")
        summary = unplaced(lead.annotations.get("summary") or "", lead.labels)
        line.append(summary or " ".join(f"{k}={v}" for k, v in sorted(lead.labels.items())))
        if width is not None:
            line.truncate(width, overflow="ellipsis")
        lines.append(line)
    if len(shown) < len(ordered) and room >= 1:
        lines.append(Text(f"  ... {len(ordered) - len(shown)} more (gpufleet alerts)", style="dim"))
    return lines


def frame(collector: Collector, head: list[Text], width: int | None, height: int | None = None, *,
          fold: bool = False) -> RenderableType:
    """One screen: the banner (``head``; folded to one line when ``fold`` or when it leaves no room), the
    status and the firing alerts, in at most ``height`` lines. Room goes first to one line per host and
    to the alerts, then to a line per GPU (hosts with a problem first), then to the full banner."""
    view = build_fleet_view(
        collector.live.hosts.values(), collector.firing(), now=time.time(),
        thresholds=thresholds_of(collector.config.rules),
    )
    active = firing(collector)
    if height is None or width is None:  # no screen: everything
        status = status_lines(view, width, title="status")
        return Group(*head, Text(), *(t.text() for t in status), Text(), *alert_lines(active, width))
    status_min = head_height(view, width) + len(view.hosts) + 1  # and a legend line
    alerts_full = 1 + len(problems(active))
    full_head = len(head) + 1
    beside = status_min  # what the full banner must leave room for
    if fold:  # after the first seconds the banner stays only where everything fits beside it
        beside = head_height(view, width) + sum(host_height(h, True) for h in view.hosts)
    if full_head + beside + 1 + alerts_full > height:
        head = [folded_banner(width, collector.web_url)] if head else []
        full_head = len(head)
    alert_rows = max(min(alerts_full, height - full_head - status_min - 1), 1)
    status_rows = height - full_head - 1 - alert_rows
    status = fitted_lines(view, width, status_rows, title="status")
    blank = [Text()] if full_head > len(head) else []
    return Group(*head, *blank, *(t.text() for t in status), Text(), *alert_lines(active, width, alert_rows))


async def _run(
    console: Console, *, seconds: float | None, interval: float, refresh: float, screen: bool
) -> None:

    workdir = Path(tempfile.mkdtemp(prefix="gpufleet-demo-"))
    log_path = workdir / "collector.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    collector: Collector | None = None
    pointed: Path | None = None  # the socket the pointer file names while the demo runs
    last: RenderableType | None = None
    live_screen = screen and console.is_terminal
    # a pipe cuts nothing: its lines are laid out whole (rich's console there is as wide as any line)
    width: int | None = console.width if live_screen else None
    try:
        cfg = demo_config(workdir)
        head = banner(str(cfg.api.socket), str(log_path), width)
        if not live_screen:
            for line in head:
                console.print(line, no_wrap=True, crop=False)
        async with SimFleet(DEMO_HOSTS, interval=interval, workdir=workdir / "fleet") as fleet:
            cfg.hosts = [h for h in fleet.host_configs()]
            for h in cfg.hosts:
                h.tags = ["demo", DEMO_HOSTS[h.name]]
            collector = Collector(cfg)
            await collector.start()
            pointed = cfg.api.resolved_socket()
            write_pointer(pointed)
            head.append(Text.assemble("  Web page (read-only): ", (str(collector.web_url), "bold")))
            if not live_screen:
                console.print(head[-1], no_wrap=True, overflow="crop")
            deadline = None if seconds is None else loop.time() + seconds
            live_ctx = _live(console) if live_screen else contextlib.nullcontext(None)
            started = loop.time()
            with _quit_keys(loop, stop, live_screen), live_ctx as live:
                while not stop.is_set() and (deadline is None or loop.time() < deadline):
                    if live is not None:
                        fold = loop.time() - started > FOLD_SECONDS
                        live.update(frame(collector, head, console.width, console.height, fold=fold),
                                    refresh=True)
                    wait = refresh if deadline is None else max(0.0, min(refresh, deadline - loop.time()))
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), wait)
            last = frame(collector, [], width)  # what stays on the terminal after the screen goes
            await collector.stop()
            collector = None
    finally:
        if pointed is not None:
            clear_pointer(pointed)
        if collector is not None:
            await collector.stop()
        for sig in installed:
            loop.remove_signal_handler(sig)
        root.removeHandler(handler)
        handler.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if last is not None:
        console.print(last, no_wrap=True, crop=False)
    console.print(Text("demo stopped; the simulated fleet and its temp data are gone.", style="dim"))
    console.print(Text(f"Next, your own GPUs: {start_hint()}.", style="dim"))


@contextlib.contextmanager
def _quit_keys(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, screen: bool) -> Iterator[None]:
    """On the live screen, ``q`` or Esc stops the demo like Ctrl-C (as they quit top and status --watch)."""
    if not screen:
        yield
        return
    with KeyReader() as keys:
        fd = keys.fd
        if fd is None:
            yield
            return

        def on_key() -> None:
            if keys.wait(0) in ("q", "Q", "esc", "eof"):
                stop.set()

        loop.add_reader(fd, on_key)
        try:
            yield
        finally:
            loop.remove_reader(fd)


def _live(console: Console) -> Any:
    from rich.live import Live

    return Live(
        console=console, screen=True, auto_refresh=False, redirect_stderr=False, redirect_stdout=False
    )


def run_demo(
    console: Console,
    *,
    seconds: float | None = None,
    interval: float = 1.0,
    refresh: float = 1.0,
    screen: bool = True,
) -> None:
    """Run the demo until Ctrl-C or ``seconds``; returns normally either way (exit 0)."""
    try:
        asyncio.run(_run(console, seconds=seconds, interval=interval, refresh=refresh, screen=screen))
    except KeyboardInterrupt:  # Ctrl-C before the handlers were installed
        pass


@click.command()
@click.option("--seconds", type=click.FloatRange(min=1), default=None,
              help="Stop after this long (for tests).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Agent sampling interval.")
@click.option("--refresh", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Screen refresh interval.")
@click.option("--no-screen", is_flag=True,
              help="Print a status snapshot now and then instead of a live screen.")
@pass_state
def demo(state: State, seconds: float | None, interval: float, refresh: float, no_screen: bool) -> None:
    """Run a simulated fleet (fake GPUs behind real SSH on loopback) and show it live. Ctrl-C quits."""
    run_demo(state.console, seconds=seconds, interval=interval, refresh=refresh, screen=not no_screen)
