"""From an agent's raw stdout bytes to validated frames, shared by the SSH and local transports.

The transports only move bytes; this module alone decides what a valid stream is, so SSH and local hosts
fail the same way. Rules: lines are bounded (a line that grows past the bound is refused as soon as the
bound is crossed, without buffering the rest), every line must decode as a wire frame of a known major
version, and the first frame must be ``hello``. Frame types and fields of the same major version that
this side does not know (a newer agent in a rolling upgrade) are skipped and counted on the host.
Any violation ends the stream with a reason; the host is the one the collector dialled, whatever the
frames claim.

Protocol 1.3 (agent/delta.py): when the hello says the agent can send deltas, the stream accepts them on the
agent's stdin (:meth:`AgentStream.attach_control` gives it the writer) and turns each delta into a whole
snapshot against the connection's base (collector/transport/delta.py), which also keeps a GPU's process
list one object while its processes stay the same: no one past this module sees a delta. A delta that does
not apply is dropped and counted (``HostState.delta_mismatches``), and the agent is asked for a keyframe.

Time: the collector's receive time bounds a frame's time. Once a frame is stamped more than
``max_clock_skew`` seconds from its receive time, the stream re-stamps it with the receive time and keeps
that offset for the frames after it (so their spacing is the agent's) until the agent's own stamps agree
again; the host is flagged ``clock_skew`` with the offset. So a clock 10 years ahead, or one stepped back
600 s, never reaches history. Process start times are left as the agent measured them (they key a process's
span, and a shift by a jittery offset would split it), except that one later than the sample itself becomes
unknown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

from gpufleet.agent import delta, wire
from gpufleet.collector.fleet.live import FleetSink, HostState
from gpufleet.collector.model import sample
from gpufleet.collector.settings import DEFAULT_MAX_CLOCK_SKEW, HostBudget
from gpufleet.collector.transport import wirefast
from gpufleet.collector.transport.budget import UUID_WINDOW, StreamBudget
from gpufleet.collector.transport.delta import DeltaBase, DeltaMismatch

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 2048


class LineFramer:
    """Splits a byte stream into lines, never holding more than ``max_line_bytes`` of one line."""

    def __init__(self, max_line_bytes: int = wire.MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._pending = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Yield each complete line (newline included). Raises FrameTooLarge when a line crosses the bound."""
        start = 0
        limit = self.max_line_bytes
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._pending:
                self._pending += data[start:end + 1]
                line = bytes(self._pending)
                self._pending.clear()
            else:
                line = data[start:end + 1]
            start = end + 1
            if len(line) > limit:
                raise wire.FrameTooLarge(f"line of {len(line)} bytes exceeds the {limit}-byte bound")
            yield line
        rest = len(data) - start
        if rest:
            if len(self._pending) + rest >= limit:
                # even if the newline came next, the line would be over the bound: refuse now
                size = len(self._pending) + rest
                self._pending.clear()
                raise wire.FrameTooLarge(
                    f"line of at least {size + 1} bytes exceeds the {limit}-byte bound")
            self._pending += data[start:]

    @property
    def pending(self) -> int:
        return len(self._pending)


class AgentStream:
    """One connection's agent output: validates frames and reports them to the sink (the live view, which
    owns ``state`` and records them); counts bad frames on ``state``.

    ``done`` resolves with the reason the stream ended (first reason wins). ``on_up`` is called once, on the
    first valid hello: that is when a host counts as up.
    """

    def __init__(self, state: HostState, sink: FleetSink, *, max_line_bytes: int = wire.MAX_LINE_BYTES,
                 clock: Callable[[], float] = time.time,
                 on_up: Callable[[wire.Hello], None] | None = None,
                 max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW, budget: HostBudget | None = None) -> None:
        self.state = state
        self.sink = sink
        self.clock = clock
        self.on_up = on_up
        self.framer = LineFramer(max_line_bytes)
        self.max_clock_skew = max_clock_skew
        self.offset = 0.0  # seconds added to the agent's timestamps (see the module docstring)
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[str] = self.loop.create_future()
        self.last_rx = self.loop.time()  # monotonic time of the last complete line
        self.budget = StreamBudget(budget or HostBudget(), self.last_rx, max_line_bytes,
                                   _host_uuids(state, clock()))
        self.hello: wire.Hello | None = None
        self.graceful = False  # ended by the collector (stop/restart): close politely with EOF
        self.grace = 2.0  # seconds a graceful close may wait for the agent to exit
        self.timed_out = False  # ended by the read deadline: the agent may be stopped or hung
        self._stderr = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self.base = DeltaBase()  # what this connection's deltas apply to
        self._control: Callable[[bytes], object] | None = None  # writes to the agent's stdin
        self._control_pending: list[bytes] = []  # lines to write once the transport attached it
        self._resync_asked = False  # a keyframe was asked for and has not come yet

    # ------------------------------------------------------------------------------------------- control

    def attach_control(self, write: Callable[[bytes], object]) -> None:
        """The transport's writer to the agent's stdin (the SSH channel, the local pipe): lines the stream
        wants to send (delta negotiation, resyncs) go through it, those before it was attached first."""
        self._control = write
        pending, self._control_pending = self._control_pending, []
        for line in pending:
            self._send_control(line)

    def _send_control(self, line: bytes) -> None:
        if self._control is None:
            self._control_pending.append(line)
            return
        try:
            self._control(line)
        except Exception as exc:  # noqa: BLE001 - a closing channel: the stream ends on its own
            log.debug("%s: cannot write to the agent's stdin: %s", self.state.name, exc)

    # ------------------------------------------------------------------------------------------- input

    def feed(self, data: bytes) -> None:
        """Agent stdout bytes. After the stream ended, further data is ignored."""
        if self.done.done():
            return
        try:
            for line in self.framer.feed(data):
                self._line(line)
                if self.done.done():
                    return
        except wire.WireError as exc:
            self._bad(str(exc))
        except Exception as exc:  # noqa: BLE001 - a decoder bug must not escape into the event loop
            log.exception("%s: frame could not be decoded", self.state.name)
            self._bad(f"frame could not be decoded: {type(exc).__name__}: {exc}"[:300])

    def feed_stderr(self, data: bytes) -> None:
        """Agent stderr: kept (the tail only) to explain an exit, and logged at debug level."""
        self._stderr += data
        if len(self._stderr) > STDERR_TAIL_BYTES:
            del self._stderr[:-STDERR_TAIL_BYTES]
        log.debug("%s: agent stderr: %s", self.state.name, data.decode(errors="replace").rstrip())

    def stderr_tail(self, limit: int = 300) -> str:
        """The last non-empty stderr line, for exit reasons ("gpufleet-agent: not found")."""
        lines = [ln.strip() for ln in self._stderr.decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1][:limit] if lines else ""

    def started(self) -> None:
        """The agent is running now: the read deadline counts from here (not from the dial)."""
        self.last_rx = self.loop.time()

    def request_stop(self, reason: str, grace: float = 2.0) -> None:
        """The collector ends this stream on purpose (stop, restart): EOF, not an error."""
        if not self.done.done():
            self.graceful = True
            self.grace = grace
        self.finish(reason)

    def finish(self, reason: str) -> None:
        """End the stream (idempotent: the first reason is kept)."""
        if not self.done.done():
            if self.hello is not None:  # what the budget dropped and did not say yet
                self._send_summary(self.budget.final_summary(self.loop.time(), self.clock()))
            self.done.set_result(reason)

    def exited(self, status: int | None, signal: str | None = None, exc: BaseException | None = None) -> None:
        """The agent or its connection ended; build the reason from what is known."""
        if exc is not None:
            text = str(exc).strip() or type(exc).__name__
            reason = "connection lost" if text.lower() == "connection lost" else f"connection lost: {text}"
        elif signal:
            reason = f"agent killed by signal {signal}"
        elif status is not None:
            reason = f"agent exited with status {status}"
        else:
            # asyncssh reports a dropped connection this way too: no exit status, no exception
            reason = "connection closed without an exit status"
        tail = self.stderr_tail()
        if tail and exc is None:
            reason += f": {tail}"
        self.finish(reason)

    # ------------------------------------------------------------------------------------------- wait

    async def wait(self, read_timeout: float) -> str:
        """Wait until the stream ends, or until no complete line arrived for ``read_timeout`` seconds."""
        loop = self.loop

        def check() -> None:
            deadline = self.last_rx + read_timeout
            if loop.time() >= deadline:
                if not self.done.done():
                    self.timed_out = True
                self.finish(f"no frame for {_secs(read_timeout)} s")
            else:
                self._timer = loop.call_at(deadline, check)

        self._timer = loop.call_at(self.last_rx + read_timeout, check)
        try:
            return await asyncio.shield(self.done)
        finally:
            self._timer.cancel()

    # ------------------------------------------------------------------------------------------- frames

    def _line(self, line: bytes) -> None:
        self.last_rx = now = self.loop.time()
        if not line.strip():
            return  # blank lines carry nothing; tolerate them
        try:
            self._budgeted(line, now)
        finally:
            self._budget_state(now)

    def _budgeted(self, line: bytes, now: float) -> None:
        budget = self.budget
        if not budget.admit_line(len(line), now):
            self.state.dropped_frames += 1
            self.state.dropped_bytes += len(line)
            return
        notes = wire.DecodeNotes()
        try:
            frame = wirefast.decode(line, self.framer.max_line_bytes, notes)
        except wire.IgnoredFrame as exc:  # a newer agent's frame type: skipped, counted, stream kept
            self.state.ignored(exc)
            log.debug("%s: %s", self.state.name, exc)
            return
        if self.hello is None and not isinstance(frame, wire.Hello):
            raise wire.MalformedFrame(f"first frame is {frame.type!r}, expected 'hello'")
        if isinstance(frame, (sample.Snapshot, wire.Hello)):
            budget.check_gpus(frame)
        elif isinstance(frame, wire.Event) and not budget.admit_event(frame, now):
            self.state.dropped_events += 1
            return
        received = self.clock()
        state = self.state
        skew_changed = self._bound_time(frame, received)
        state.noted(notes)
        if isinstance(frame, sample.Delta):
            try:
                frame = self.base.apply(frame, frame.ts + self.max_clock_skew)
            except DeltaMismatch as exc:
                self._mismatch(exc)
                return
        elif isinstance(frame, sample.Snapshot):
            frame = self.base.full(frame, frame.ts + self.max_clock_skew)
            self._resync_asked = False
        elif isinstance(frame, wire.Hello):
            if self.hello is not None:
                raise wire.MalformedFrame("second 'hello' on one stream")
            self.hello = frame
            if frame.delta:
                self._send_control(delta.ACCEPT)
        try:
            self.sink.frame(state.name, frame, received)  # the live view records it (once) and passes it on
        except Exception:  # noqa: BLE001 - a broken consumer must not take the host down
            log.exception("%s: sink failed on a %s frame", state.name, frame.type)
        if isinstance(frame, wire.Hello) and self.on_up is not None:
            self.on_up(frame)
        elif skew_changed and state.status == "up":
            self._emit_state()  # a host flag changed: the live view's listeners learn it now

    def _mismatch(self, exc: DeltaMismatch) -> None:
        """A delta that does not apply: dropped, counted, and a keyframe asked for (once until it comes)."""
        self.state.delta_mismatches += 1
        if not self._resync_asked:
            self._resync_asked = True
            log.info("%s: %s; asking the agent for a full snapshot", self.state.name, exc)
            self._send_control(delta.RESYNC)

    def _bound_time(self, frame: sample.Frame | sample.Delta, received: float) -> bool:
        """Re-stamp ``frame`` if the agent's clock is off (module docstring); True if the host's
        ``clock_skew`` flag changed. (A snapshot's process start times are bounded by its base.)"""
        bound = self.max_clock_skew
        ts = frame.ts + self.offset
        if abs(ts - received) > bound:
            raw = received - frame.ts
            old, self.offset = self.offset, (0.0 if abs(raw) <= bound else raw)
            ts = received if self.offset else frame.ts
            if self.offset and not old:
                log.warning("%s: agent clock is %.1f s %s the collector's: using the collector's clock",
                            self.state.name, abs(raw), "behind" if raw > 0 else "ahead of")
        if self.offset:
            frame.ts = ts
        state = self.state
        skew = self.offset or None
        if (skew is None) == (state.clock_skew is None):
            state.clock_skew = skew
            return False
        state.clock_skew = skew
        return True

    def _budget_state(self, now: float) -> None:
        """After each line: the summary event when one is due, and the host's ``over_budget`` flag."""
        budget = self.budget
        if budget.last_drop is None and not budget.recent_drop:
            return  # never dropped anything: the common case costs one comparison
        if self.hello is not None:
            self._send_summary(budget.summary(now, self.clock()))
        state = self.state
        flagged = budget.flagged(now)
        if flagged != state.over_budget:
            state.over_budget = flagged
            if state.status == "up":
                self._emit_state()

    def _send_summary(self, event: wire.Event | None) -> None:
        if event is None:
            return
        log.warning("%s: %s", self.state.name, event.message)
        try:
            self.sink.frame(self.state.name, event, event.ts)
        except Exception:  # noqa: BLE001
            log.exception("%s: sink failed on the budget summary", self.state.name)

    def _emit_state(self) -> None:
        try:
            self.sink.host_state(self.state)
        except Exception:  # noqa: BLE001 - a broken consumer must not take the host down
            log.exception("%s: sink failed on host_state", self.state.name)

    def _bad(self, message: str) -> None:
        self.state.bad_frames += 1
        reason = f"protocol error: {message}"
        log.warning("%s: closing the agent stream: %s", self.state.name, reason)
        self.finish(reason)


def _host_uuids(state: HostState, now: float) -> set[str]:
    """The host's GPU UUID set of the current window (budget.UUID_WINDOW), kept across connections."""
    if not state.uuids_since or not 0 <= now - state.uuids_since < UUID_WINDOW:
        state.uuids.clear()
        state.uuids_since = now
    return state.uuids


def _secs(t: float) -> str:
    """8.0 -> "8.0", 0.05 -> "0.05": one decimal unless that would hide the value."""
    return f"{t:.1f}" if round(t, 1) == t else f"{t:g}"
