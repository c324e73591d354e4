"""Every numeric config key's range, as the converter the section specs use: one owner for the bounds.

A :class:`Bound` is what a spec maps a numeric key to, so the range the parser enforces (``config check``
reports ``file:line: key: must be at most ...``), the table deploy/OPERATOR.md prints and the tests that
feed every key absurd values (tests/config/test_ranges.py, which walks :func:`numeric_keys`) all read the
same object. A number with no upper bound let ``queue_size: 100000000000000000000`` switch off the cap it
exists for; every key here has both ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from gpufleet.agent import wire
from gpufleet.collector.config.nodes import Parser
from gpufleet.collector.settings import MAX_CLOCK_AHEAD, MAX_WORKERS
from gpufleet.collector.units import MAX_DURATION, MAX_DURATION_TEXT
from yaml.nodes import Node

Kind = Literal["integer", "number", "duration", "mode"]

_UNITS: Final = (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration_text(seconds: float) -> str:
    """A bound as the config would write it: ``10m``, ``1d``, ``100 years``, ``0.5s``."""
    if seconds >= MAX_DURATION:
        return MAX_DURATION_TEXT
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _num_text(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:g}"


@dataclass(frozen=True, slots=True)
class Bound:
    """A numeric key: its kind, its range ``lo .. hi`` (``above``: ``lo`` itself excluded), whether null
    is allowed (``nullable``) and whether the value is a list of such numbers (``many``)."""

    kind: Kind
    lo: float
    hi: float
    above: bool = False
    nullable: bool = False
    many: bool = False
    unit: str = ""  # for the docs: "bytes", "%", "MiB", "°C"

    def contains(self, value: float) -> bool:
        return (value > self.lo if self.above else value >= self.lo) and value <= self.hi

    def __call__(self, p: Parser, node: Node, key: str) -> Any:
        if self.nullable and p.is_null(node):
            return None
        if self.many:
            return p.each(node, key, lambda n, k: self._one(p, n, k))
        return self._one(p, node, key)

    def _one(self, p: Parser, node: Node, key: str) -> Any:
        if self.kind == "integer":
            return p.integer(node, key, lo=int(self.lo), hi=int(self.hi))
        if self.kind == "number":
            return p.number(node, key, lo=self.lo, hi=self.hi)
        if self.kind == "mode":
            return file_mode(p, node, key)
        seconds = p.duration(node, key, positive=self.above and self.lo == 0)
        if not self.contains(seconds):
            edge = (f"more than {duration_text(self.lo)}" if self.above else
                    f"at least {duration_text(self.lo)}") if seconds <= self.lo else \
                f"at most {duration_text(self.hi)}"
            p.fail(f"must be {edge}, got {duration_text(seconds)}", node, key)
        return seconds

    def describe(self) -> str:
        """The range in words, as deploy/OPERATOR.md lists it."""
        if self.kind == "mode":
            text = f"{self.lo:04o} .. {int(self.hi):04o} (octal file mode)"
        elif self.kind == "duration":
            low = duration_text(self.lo) if self.lo else "0"
            text = f"{'> ' if self.above else ''}{low} .. {duration_text(self.hi)}"
        else:
            text = f"{_num_text(self.lo)} .. {_num_text(self.hi)}"
        if self.unit:
            text += f" {self.unit}"
        if self.many:
            text = f"list of {text}"
        return text + (", or null" if self.nullable else "")


def file_mode(p: Parser, node: Node, key: str) -> int:
    """A Unix file mode: ``"0660"`` (octal, quoted) or an integer read as written in octal."""
    value, from_env = p.env_scalar(node, key)
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        try:
            value = int(text, 8)
        except ValueError:
            p.fail("expected an octal file mode like '0660'", node, key)
    elif isinstance(value, bool) or not isinstance(value, int):
        p.fail(f"expected a file mode like '0660', got {p.kind(node)}", node, key)
    elif value > 0o777 and not from_env:
        p.fail(f"{value} is not a file mode; write it in octal, quoted: '0{value}'", node, key)
    if not 0 <= value <= 0o777:
        p.fail("a file mode is between '0000' and '0777'", node, key)
    return value


def integer(lo: int, hi: int, unit: str = "", *, many: bool = False) -> Bound:
    return Bound("integer", lo, hi, unit=unit, many=many)


def number(lo: float, hi: float, unit: str = "") -> Bound:
    return Bound("number", lo, hi, unit=unit)


def duration(lo: float, hi: float = MAX_DURATION, *, above: bool = False, nullable: bool = False) -> Bound:
    return Bound("duration", lo, hi, above=above, nullable=nullable)


#: A duration that must be more than 0 (an interval, a timeout, a retention).
def positive(hi: float = MAX_DURATION, *, nullable: bool = False) -> Bound:
    return duration(0.0, hi, above=True, nullable=nullable)


HOUR, DAY = 3600.0, 86400.0
GIB = 1 << 30
PERCENT = integer(0, 100, "%")
RATIO = number(0.0, 1.0)
MEMORY_MIB = integer(0, 1 << 20, "MiB")  # up to 1 TiB of GPU memory

#: Top-level numbers.
TOP: Final[dict[str, Bound]] = {
    "max_hosts": integer(1, 10_000_000),
    "max_concurrent_connects": integer(1, 1024),
    "workers": integer(1, MAX_WORKERS),
}

#: A host's (and ``defaults:``'s) numbers; ``budget`` has its own below.
HOST: Final[dict[str, Bound]] = {
    "port": integer(1, 65535),
    "interval": positive(HOUR),
    "connect_timeout": positive(HOUR),
    "keepalive_interval": positive(HOUR),
    "keepalive_count_max": integer(1, 1000),
    "read_timeout": positive(DAY, nullable=True),
    "max_line_bytes": integer(1024, GIB, "bytes"),
    # the stream re-stamps frames further off than this; the store refuses times further ahead than
    # MAX_CLOCK_AHEAD, so no frame the stream lets through is refused there
    "max_clock_skew": positive(MAX_CLOCK_AHEAD),
}
BUDGET: Final[dict[str, Bound]] = {
    "bytes_per_second": number(1024, GIB, "bytes"),
    "bytes_burst": number(1024, 4 * GIB, "bytes"),
    "events_per_second": number(0.01, 100_000),
    "events_burst": number(1, 1_000_000),
    "max_gpus": integer(1, 4096),
    "max_event_message": integer(64, 1 << 20, "characters"),
    "summary_interval": positive(DAY),
}
STORAGE: Final[dict[str, Bound]] = {
    "raw_retention": positive(),
    "minute_retention": positive(),
    "hour_retention": positive(),
    "batch_max_rows": integer(1, 1_000_000),
    "batch_max_delay": duration(0.0, 60.0),
}
NOTIFIER: Final[dict[str, Bound]] = {
    "timeout": positive(HOUR),
    "retries": integer(0, 100),
}
ALERTING: Final[dict[str, Bound]] = {
    "group_wait": duration(0.0, DAY),
    "group_interval": positive(),
    "repeat_interval": positive(),
    "queue_size": integer(1, 100_000),
    "retry_backoff": positive(HOUR),
    "retry_backoff_max": positive(DAY),
    "notifier_down_after": positive(),
    "job_notes_min_gpu_hours": number(0.0, 1_000_000),
}
API: Final[dict[str, Bound]] = {"mode": Bound("mode", 0, 0o777)}
WEB: Final[dict[str, Bound]] = {"max_clients": integer(1, 10_000)}
#: A rule selector's GPU indexes.
SELECTOR: Final[dict[str, Bound]] = {"gpus": integer(0, wire.INDEX_MAX, many=True)}

#: Rule parameters by name (a name means the same in every rule that takes it). Durations are the rules'
#: RULE_DURATION_PARAMS; every numeric parameter in DEFAULT_RULES needs an entry (sections.py checks it).
RULE_PARAMS: Final[dict[str, Bound]] = {
    **{name: duration(0.0) for name in ("for", "keep_firing_for", "no_session_idle", "hold",
                                        "spike_tolerance", "window", "note_once_per", "restart_window")},
    "util_below": PERCENT,
    "high_above": PERCENT,
    "low_below": PERCENT,
    "mem_busy_at_least": PERCENT,
    "sm_active_at_least": PERCENT,
    "power_idle_ratio": RATIO,
    "stuck_power_ratio": RATIO,
    "busy_share": RATIO,
    "min_memory_mib": MEMORY_MIB,
    "max_memory_mib": MEMORY_MIB,
    "temp_at_least": integer(0, wire.TEMP_RANGE[1], "°C"),
    "missed_intervals": integer(1, 1000),
    "min_swings_per_minute": number(0.0, 60.0),
    "memory_steady_pct": number(0.0, 100.0, "%"),
    "memory_at_least_pct": number(0.0, 100.0, "%"),
    "restarts_at_least": integer(1, 1000),
    "min_gpus": integer(2, 4096),
    "warning_xids": integer(0, 65535, many=True),
}
