"""``gpufleet-agent``: sample NVML + /proc and write wire-protocol frames (JSON lines) to stdout.

Stdout carries frames and nothing else: the real fd 1 is kept for frames and fd 1 itself is pointed at
stderr, so a stray print (ours, a library's, the C library's) cannot corrupt the stream. Logs go to stderr.

Lifecycle: ``hello`` first, then a ``snapshot`` every ``--interval`` (seq increasing), ``event`` frames as
things happen (Xid from a watcher thread, gpu_lost, driver_error). Liveness: every frame counts; a
``heartbeat`` goes out only when no frame was written for ``--heartbeat`` seconds (a stalled NVML call, or
NVML re-initialising after a driver error). Exit 0 on stdin EOF (watched only when stdin is a pipe or
socket), SIGTERM, SIGINT or a broken stdout pipe; exit 2 when NVML is unusable at start-up or the scenario
is invalid.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO, Any

from gpufleet.agent import __version__, wire
from gpufleet.agent.errors import AgentError, DriverError, NvmlUnavailable
from gpufleet.agent.k8s import DEFAULT_ROOT as KUBELET_LOGS
from gpufleet.agent.slurm_node import LIST_EVERY

log = logging.getLogger("gpufleet.agent")

EXIT_OK = 0
EXIT_SETUP = 2
#: Where the real backend looks for Slurm's job cgroups (agent/slurm_node.py).
CGROUP_ROOT = "/sys/fs/cgroup"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    """0 ("never") or a positive number, however 0 is spelt ("0", "0.00", "0e0")."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return _positive(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpufleet-agent",
        description="Read NVML and /proc on this GPU host; write gpufleet frames (JSON lines) to stdout.",
    )
    p.add_argument(
        "--interval",
        type=_positive,
        default=1.0,
        metavar="SECONDS",
        help="seconds between snapshots (sub-second allowed; default 1.0)",
    )
    p.add_argument(
        "--fake",
        metavar="SCENARIO",
        help="use the fake backend with a scenario YAML file or a bundled name (e.g. wasting)",
    )
    p.add_argument("--once", action="store_true", help="print one snapshot as a table (for people) and exit")
    p.add_argument(
        "--json", action="store_true", help="with --once: print the snapshot frame as JSON instead"
    )
    p.add_argument(
        "--heartbeat",
        type=_non_negative,
        default=None,
        metavar="SECONDS",
        help="send a heartbeat when no frame went out for this long (default 2 x interval; 0: never)",
    )
    p.add_argument(
        "--hang-after",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="an NVML read still running after this long marks its GPU hung; the others keep being sampled "
        "(default 10)",
    )
    p.add_argument(
        "--max-frames", type=_count, default=None, metavar="N", help="exit after N snapshots (testing)"
    )
    p.add_argument(
        "--hostname",
        default=None,
        help="hostname to report (default: this host; with --fake: the scenario's; also seeds fake UUIDs)",
    )
    p.add_argument(
        "--redact-words",
        default=None,
        metavar="WORDS",
        help="comma-separated words: an option or VAR=value whose name holds one has its value masked in "
        "command lines (default token,secret,password,passwd,key,auth,credential, or $GPUFLEET_REDACT_WORDS; "
        "'-': URL passwords only)",
    )
    p.add_argument(
        "--scontrol",
        default=None,
        metavar="PATH",
        help="Slurm's scontrol, to name the jobs in cgroups (default: $GPUFLEET_SCONTROL, else scontrol on "
        "PATH; none found: off; '': off; with --fake only when given)",
    )
    p.add_argument(
        "--slurm-node",
        default=None,
        metavar="NAME",
        help="this node's Slurm NodeName, when it is not the host name (picks its GPUs from a job's "
        "allocation, and its cgroups from a second slurmd's)",
    )
    p.add_argument(
        "--slurm-list-every",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="seconds between two listings of the Slurm jobs on this node, which find jobs that hold GPUs "
        f"and run nothing on them (default {LIST_EVERY:g}; from the job cgroups, else squeue, which loads "
        "slurmctld)",
    )
    p.add_argument(
        "--kubelet-logs",
        default=KUBELET_LOGS,
        metavar="DIR",
        help="where the kubelet keeps pods/ and containers/ log directories, which name a Kubernetes "
        f"process's namespace, pod and container (default {KUBELET_LOGS}; '': off)",
    )
    p.add_argument("--no-stdin-watch", action="store_true", help="do not exit when stdin reaches EOF")
    p.add_argument("--version", action="version", version=f"gpufleet-agent {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr (-vv: debug)")
    p.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default warning)",
    )
    return p


# ------------------------------------------------------------------------------------------- output


class FrameWriter:
    """One frame = one write + one flush, under a lock (the Xid thread writes too)."""

    def __init__(
        self, stream: IO[bytes], on_broken: Callable[[], None], clock: Callable[[], float] = time.monotonic
    ):
        self.stream = stream
        self.on_broken = on_broken
        self.clock = clock
        self.lock = threading.Lock()
        self.broken = False
        self.last_write = clock()
        self.frames = 0

    def write(self, frame: wire.Frame) -> bool:
        data = wire.encode(frame)
        with self.lock:
            if self.broken:
                return False
            try:
                self.stream.write(data)
                self.stream.flush()
            except (BrokenPipeError, ConnectionResetError, ValueError):
                self.broken = True
            except OSError as exc:
                log.error("cannot write to stdout: %s", exc)
                self.broken = True
            if self.broken:
                self.on_broken()
                return False
            self.last_write = self.clock()
            self.frames += 1
            return True


def _claim_stdout() -> IO[bytes]:
    """Keep fd 1 for frames; point fd 1 (and sys.stdout) at stderr so nothing else can reach the stream."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "wb")


def _watch_stdin(stop: threading.Event) -> bool:
    """Exit on stdin EOF, but only when stdin is a pipe or socket (under systemd it is /dev/null)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False

    def run() -> None:
        while True:
            try:
                if not os.read(0, 65536):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        log.info("stdin closed; exiting")
        stop.set()

    threading.Thread(target=run, name="stdin-watch", daemon=True).start()
    return True


# -------------------------------------------------------------------------------------------- loop


class Agent:
    """The streaming loop: hello, snapshots at a fixed cadence, events, heartbeats, driver recovery."""

    def __init__(
        self,
        sampler: Any,
        writer: FrameWriter,
        stop: threading.Event,
        *,
        hostname: str,
        interval: float = 1.0,
        heartbeat: float | None = None,
        max_frames: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.sampler = sampler
        self.writer = writer
        self.stop = stop
        self.hostname = hostname
        self.interval = interval
        self.heartbeat = 2.0 * interval if heartbeat is None else heartbeat
        self.max_frames = max_frames
        self.clock = clock
        self.wall = wall
        self.snapshots = 0
        self.last_seq = 0
        self.watcher: Any = None
        self._defects: set[str] = set()

    def _emit_event(self, event: wire.Event) -> None:
        self.writer.write(event)

    def _start_watcher(self) -> None:
        from gpufleet.agent.events import XidWatcher

        handles = [g.handle for g in self.sampler.gpus if g.handle is not None]
        self.watcher = XidWatcher(
            self.sampler.gw, handles, self.sampler.handle_map(), self._emit_event, wall=self.wall
        )
        self.watcher.start()

    def _stop_watcher(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None

    def _heartbeats(self) -> None:
        """Wakes when a heartbeat would be due (``period`` after the last write), not on a fixed tick: while
        snapshots flow, about once per (period - interval), and a stall gets its heartbeat on time."""
        period = self.heartbeat
        while not self.stop.wait(max(0.01, self.writer.last_write + period - self.clock())):
            if self.clock() - self.writer.last_write >= period and not self.writer.write(
                    wire.Heartbeat(ts=self.wall(), seq=self.last_seq)):
                return  # stdout is gone (the writer stops the agent)

    def _publish(self, snapshot: wire.Snapshot, events: list[wire.Event]) -> None:
        from gpufleet.agent.sampler import shrink_to_fit

        for ev in events:
            self.writer.write(ev)
        if sum(len(g.processes) for g in snapshot.gpus) > 500:
            snapshot = shrink_to_fit(snapshot)
        self.writer.write(snapshot)
        self.last_seq = snapshot.seq
        self.snapshots += 1
        if self.max_frames is not None and self.snapshots >= self.max_frames:
            self.stop.set()

    def _recover(self, exc: Exception) -> None:
        """Driver/library error: one driver_error event, then re-init with backoff while heartbeating."""
        log.error("%s; re-initialising NVML", exc)
        self.writer.write(wire.Event(ts=self.wall(), kind="driver_error", message=str(exc)))
        self._stop_watcher()
        delay = max(0.05, min(self.interval, 1.0))
        while not self.stop.wait(delay):
            try:
                self.sampler.reopen()
            except NvmlUnavailable as again:
                delay = min(delay * 2, 30.0)
                log.info("re-init failed (%s); next try in %.1f s", again, delay)
                continue
            log.warning("NVML re-initialised")
            self._start_watcher()
            return

    def _reinit(self) -> Exception | None:
        """Re-initialise NVML while a GPU is lost, so one that comes back (``nvidia-smi -r``, a reset after
        an Xid) is picked up with a fresh handle; returns the error to recover from if NVML is gone."""
        log.info("a GPU is lost: re-initialising NVML to look for it")
        self._stop_watcher()
        try:
            self.sampler.reopen()
        except (NvmlUnavailable, DriverError) as exc:
            return exc
        self._start_watcher()
        return None

    def _report_defect(self, exc: Exception) -> None:
        """One ``agent_error`` event (and a traceback on stderr) per kind of unexpected failure."""
        key = f"{type(exc).__name__}: {exc}"[:200]
        if key in self._defects:
            return
        self._defects.add(key)
        log.exception("sampling failed unexpectedly; the agent goes on (please report this)")
        self.writer.write(wire.Event(ts=self.wall(), kind="agent_error", message=f"sampling failed: {key}"))

    def run(self) -> int:
        try:
            if self.stop.is_set():  # a signal during start-up
                return EXIT_OK
            pending: Exception | None = None
            first: tuple[wire.Snapshot, list[wire.Event]] | None = None
            started = self.wall()  # hello goes out first: its ts must not be later than the first snapshot's
            try:
                first = self.sampler.sample()  # before hello, so hello can say whether pids resolve
            except DriverError as exc:
                pending = exc
            if not self.writer.write(self.sampler.hello(self.hostname, __version__, ts=started)):
                return EXIT_OK  # stdout already gone
            if self.heartbeat > 0:
                threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True).start()
            self._start_watcher()
            if first is not None:
                self._publish(*first)
            next_at = self.clock() + self.interval
            while not self.stop.is_set():
                if pending is not None:
                    self._recover(pending)
                    pending = None
                    next_at = self.clock()
                if self.stop.wait(max(0.0, next_at - self.clock())):
                    break
                next_at += self.interval
                if next_at < self.clock():  # fell behind (slow NVML): skip, don't burst
                    next_at = self.clock() + self.interval
                try:
                    self._publish(*self.sampler.sample())
                except DriverError as exc:
                    pending = exc
                except Exception as exc:  # a defect of ours on a path the tests missed: say so, keep going
                    self._report_defect(exc)
                    continue
                if pending is None and self.sampler.reinit_due():
                    pending = self._reinit()
        finally:
            self._stop_watcher()
            try:
                self.sampler.close()
            except Exception as exc:  # shutting down: never fail the exit for this
                log.debug("close: %s", exc)
        return EXIT_OK


# --------------------------------------------------------------------------------------------- main


def _setup_logging(args: argparse.Namespace) -> None:
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    if args.log_level:
        level = getattr(logging, args.log_level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gpufleet-agent: %(levelname)s: %(message)s"))
    root = logging.getLogger("gpufleet")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _handle_signals(stop: threading.Event) -> None:
    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d; exiting", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(sig, on_signal)
        except ValueError:  # not the main thread (embedded use)
            pass


def _fail(message: str) -> int:
    print(f"gpufleet-agent: {message}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def _build(args: argparse.Namespace) -> tuple[Any, str]:
    """The sampler (real or fake backend) and the hostname to report. Raises AgentError subclasses.

    ``--once`` gets no Slurm resolver: it answers in the background, after the one sample."""
    from gpufleet.agent.nvml import Gateway
    from gpufleet.agent.sampler import HANG_AFTER, Sampler
    from gpufleet.agent.slurm import find_scontrol, resolver_for

    hang_after = HANG_AFTER if args.hang_after is None else args.hang_after
    if args.fake:
        from gpufleet.agent import fake

        scenario = fake.load_scenario(args.fake, hostname=args.hostname)
        lib = fake.FakeNvml(scenario)
        slurm = None if args.once else resolver_for(find_scontrol(args.scontrol, explicit_only=True))
        sampler = Sampler(Gateway(lib, backend="fake"), fake.FakeProcs(lib), slurm=slurm,
                          hang_after=hang_after)
        return sampler, scenario.hostname
    from gpufleet.agent.driver import pending_upgrade
    from gpufleet.agent.k8s import kubelet_logs_for
    from gpufleet.agent.procinfo import ProcReader
    from gpufleet.agent.redact import ENV_WORDS, Redactor, words_from

    words = args.redact_words if args.redact_words is not None else os.environ.get(ENV_WORDS)
    procs = ProcReader(redactor=Redactor(words_from(words)), pods=kubelet_logs_for(args.kubelet_logs))
    slurm = None if args.once else resolver_for(find_scontrol(args.scontrol), node=args.slurm_node,
                                                cgroup_root=CGROUP_ROOT, list_every=args.slurm_list_every)
    sampler = Sampler(Gateway(), procs, driver_check=pending_upgrade, slurm=slurm, hang_after=hang_after)
    return sampler, args.hostname or socket.gethostname()


def main(argv: list[str] | None = None, stdout: IO[bytes] | None = None) -> int:
    """Console-script entry point; returns the exit code. ``stdout`` (tests) skips the fd juggling."""
    args = build_parser().parse_args(argv)
    _setup_logging(args)
    if args.json and not args.once:
        log.info("--json only changes --once output; the stream is always JSON")
    stop = threading.Event()
    if not args.once:  # installed before NVML init, which can take seconds without the persistence daemon
        _handle_signals(stop)
    try:
        sampler, hostname = _build(args)
        sampler.open()
    except ImportError as exc:
        return _fail(f"NVML not available: cannot import pynvml ({exc}); install nvidia-ml-py")
    except AgentError as exc:
        return _fail(str(exc))

    out = stdout if stdout is not None else _claim_stdout()
    if args.once:
        return _once(sampler, hostname, out, args.json)
    if not args.no_stdin_watch:
        _watch_stdin(stop)
    writer = FrameWriter(out, on_broken=stop.set)
    agent = Agent(
        sampler,
        writer,
        stop,
        hostname=hostname,
        interval=args.interval,
        heartbeat=args.heartbeat,
        max_frames=args.max_frames,
    )
    code = agent.run()
    try:
        out.flush()
    except (OSError, ValueError):
        pass
    if stdout is None:
        try:
            out.close()
        except (OSError, ValueError):
            pass
    return code


def _once(sampler: Any, hostname: str, out: IO[bytes], as_json: bool) -> int:
    from gpufleet.agent.table import render, terminal_width

    try:
        snapshot, _events = sampler.sample()
        hello = sampler.hello(hostname, __version__)
    except DriverError as exc:
        return _fail(str(exc))
    finally:
        sampler.close()
    try:
        if as_json:
            out.write(wire.encode(snapshot))
        else:
            out.write(render(snapshot, hello, width=terminal_width(out)).encode())
        out.flush()
    except BrokenPipeError:
        pass
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
