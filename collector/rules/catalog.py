"""Every fact about a rule, in one place: its typed parameters and their defaults, its severity, the flag a
person reads, how the flag looks, where it sorts, the words said about it, and whether it counts as waste.

Everything that shows or checks a rule reads this module: the settings' DEFAULT_RULES and the config
loader (parameter names, types, durations), the rules themselves (their typed parameters), classify's
thresholds, the status screen, ``top``, ``alerts``, the report, the user and job notes, the notifiers'
``min_severity``, and the web page (through the query API and its model, never a copy in the page).
Plain data and pure functions: the CLI imports it on every command.

Parameters are dataclasses (read-only by convention: not frozen, which would make importing this module,
on every CLI command, twice as slow): a field's default is the rule's default, its type is the type the
config accepts (an ``int`` default takes whole numbers only), and :func:`duration` marks the ones the
config reads as durations (``30m``). ``for``, ``severity`` and ``keep_firing_for`` are every rule's, on
:class:`RuleSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypeVar

from gpufleet.agent.wire import WARNING_XIDS

Severity = Literal["info", "warning", "critical"]
#: Alert severities, lowest first: ``min_severity`` and every "worst first" order compare by this.
SEVERITIES: Final[tuple[Severity, ...]] = ("info", "warning", "critical")
#: How a severity looks on a terminal (rich styles).
SEVERITY_STYLES: Final[Mapping[str, str]] = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def severity_rank(severity: str) -> int:
    """0 for info .. 2 for critical; a severity this collector does not know counts as a warning."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else 1


def duration(seconds: float) -> Any:
    """A parameter the config reads as a duration (``90s``, ``30m``, ``2h``); seconds here."""
    return field(default=seconds, metadata={"duration": True})


def listed(*items: Any) -> Any:
    """A parameter that is a list (the config's YAML list; a tuple here)."""
    return field(default=tuple(items))


P = TypeVar("P", bound="Params")


@dataclass(eq=False)
class Params:
    """A rule's own parameters (none: rules that only have ``for``, ``severity``, ``keep_firing_for``)."""

    @classmethod
    def of(cls: type[P], values: Mapping[str, Any] | None) -> P:
        """From configured values (already checked by the config loader); keys not of this rule are
        ignored (the common ones), missing ones take their defaults."""
        values = values or {}
        got = {f.name: values[f.name] for f in fields(cls) if f.name in values}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in got.items()})

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """name -> default, lists as lists (the shape the config loader reads and the settings hold)."""
        out: dict[str, Any] = {}
        for f in fields(cls):
            value = f.default
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def durations(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls) if f.metadata.get("duration"))


@dataclass(eq=False)
class Wasted(Params):
    util_below: int = 5  # percent: under it a sample is idle unless another signal sees work
    min_memory_mib: int = 256  # a process holding less is not a holder
    power_idle_ratio: float = 0.0  # low util with power at or above this share of the limit is busy (0: off)
    spike_tolerance: float = duration(60.0)  # busy runs up to this long do not end an idle streak
    stuck_power_ratio: float = 0.0  # busy util under this share of the power limit is stuck (0: off)
    busy_share: float = 0.5  # busy more than this share of the time (moving average): not wasted
    mem_busy_at_least: int = 10  # percent of memory bandwidth that is work
    sm_active_at_least: int = 3  # percent of SMs active (GPM) that is work


@dataclass(eq=False)
class Idle(Params):
    max_memory_mib: int = 256  # memory used under this on a GPU with no process: free


@dataclass(eq=False)
class Stale(Params):
    no_session_idle: float = duration(3600.0)  # a process re-parented to init, unused this long, is stale
    util_below: int = 5  # percent: the GPU's util under it (no per-process SM util) is "unused"


@dataclass(eq=False)
class OrphanedMemory(Params):
    min_memory_mib: int = 256


@dataclass(eq=False)
class Overheating(Params):
    temp_at_least: int = 85  # Celsius, or the GPU's own slowdown threshold where lower


@dataclass(eq=False)
class Throttling(Params):
    reasons: tuple[str, ...] = listed("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


@dataclass(eq=False)
class Xid(Params):
    warning_xids: tuple[int, ...] = listed(*sorted(WARNING_XIDS))  # Xids that are warnings (the wire's set)
    hold: float = duration(3600.0)  # an Xid alert stays this long after the event


@dataclass(eq=False)
class HostDown(Params):
    missed_intervals: int = 3  # an up host silent for this many sampling intervals is down


@dataclass(eq=False)
class DuplicateGpu(Params):
    window: float = duration(30.0)  # a UUID seen on two hosts within this is one GPU on both


@dataclass(eq=False)
class Underused(Params):
    util_below: int = 30  # percent: a process's mean util under it (but not idle) is underused
    window: float = duration(1800.0)
    note_once_per: float = duration(86400.0)  # one note per process per this


@dataclass(eq=False)
class InputBound(Params):
    window: float = duration(120.0)
    high_above: int = 70  # percent
    low_below: int = 20  # percent
    min_swings_per_minute: float = 4.0
    memory_steady_pct: float = 5.0  # memory within this share of the total: steady


@dataclass(eq=False)
class IdlePeers(Params):
    window: float = duration(60.0)
    min_gpus: int = 2


@dataclass(eq=False)
class NearOom(Params):
    memory_at_least_pct: float = 95.0
    restarts_at_least: int = 2  # processes that filled the GPU and died: a crash loop (0: off)
    restart_window: float = duration(1800.0)


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """One rule as everything outside its implementation sees it."""

    name: str
    severity: Severity
    for_seconds: float
    #: where the rule's flag sorts when flags are listed, the worst first (a host's summary line)
    rank: int
    params: type[Params] = Params
    #: once firing, a condition that clears keeps the alert firing this long (Prometheus 2.42)
    keep_firing_for: float = 0.0
    flag: str = ""  # the short name on the status screen; "" -> the rule's name
    short: str = ""  # the flag where its column is too narrow for it (never cut); "" -> the flag
    style: str = "bold"  # the flag on a terminal (a rich style)
    colour: str | None = None  # the flag on the web page (CSS); None: a plain badge, not a cell colour
    #: held but not used: counts as waste wherever waste is counted (by user, top's sort, GPU-hours)
    waste: bool = False
    #: its alerts name one user's processes: the text says how to keep them, the user may be mailed
    user: bool = False
    note: str = ""  # the user note's words: "your GPU on n1 <note>"
    check: str = ""  # what to check, in a job's end note, when the rule fired on the job's GPUs

    @property
    def flag_name(self) -> str:
        return self.flag or self.name

    @property
    def short_name(self) -> str:
        return self.short or self.flag_name

    def defaults(self) -> dict[str, Any]:
        """The rule's config defaults: ``for``, ``severity``, its parameters, ``keep_firing_for``."""
        return {"for": self.for_seconds, "severity": self.severity, **self.params.defaults(),
                "keep_firing_for": self.keep_firing_for}


#: Every rule, in the config's order (``gpufleet config example`` and DEFAULT_RULES list them so).
RULES: Final[tuple[RuleSpec, ...]] = (
    RuleSpec("wasted", "warning", 1800.0, 10, Wasted, style="bold black on yellow", colour="#e08a00",
             waste=True, user=True, note="is holding memory but idle",
             check="the GPUs sat idle (or stuck) while held: free GPUs the job does not compute on"),
    RuleSpec("idle", "info", 7200.0, 16, Idle, style="dim"),
    RuleSpec("stale", "warning", 0.0, 9, Stale, style="bold white on magenta", colour="#b86b00", waste=True,
             user=True, note="has a stale process",
             check="a zombie or orphaned process kept GPU memory: make the job's exit kill its workers"),
    RuleSpec("orphaned_memory", "warning", 600.0, 12, OrphanedMemory, flag="orphaned", short="orph",
             style="magenta",
             colour="#a05cc8", waste=True),
    RuleSpec("overheating", "critical", 120.0, 7, Overheating, flag="hot", style="bold white on red",
             colour="#d63030"),
    RuleSpec("throttling", "warning", 300.0, 15, Throttling, flag="throttled", short="thrtl", style="yellow",
             colour="#d36b6b"),
    RuleSpec("gpu_lost", "critical", 0.0, 1, flag="lost", style="bold white on red", colour="#5a1a1a"),
    RuleSpec("xid", "critical", 0.0, 2, Xid, style="bold red"),
    RuleSpec("ecc", "critical", 0.0, 3, style="bold red"),
    RuleSpec("gpu_health", "critical", 0.0, 4, flag="health", short="hlth", style="bold red",
             colour="#7a2e8a"),
    RuleSpec("host_down", "critical", 0.0, 0, HostDown, keep_firing_for=60.0, flag="down", style="bold red"),
    RuleSpec("storage", "critical", 0.0, 5, short="disk", style="bold red"),
    RuleSpec("duplicate_gpu", "warning", 0.0, 6, DuplicateGpu, short="dup", style="bold red"),
    RuleSpec("collector_overloaded", "warning", 0.0, 18, short="overload"),
    RuleSpec("notifier_down", "warning", 0.0, 19, short="notif"),  # raised after alerting.notifier_down_after
    # diagnoses (rules/patterns.py, rules/peers.py): what pattern, and what to check
    RuleSpec("underused", "info", 0.0, 13, Underused, short="under", style="yellow", user=True,
             note="is underused (low mean util)",
             check="low mean util: input pipeline, batch size, or a smaller GPU / MIG slice"),
    RuleSpec("input_bound", "warning", 600.0, 14, InputBound, short="input", style="yellow",
             check="util sawtooth: the input pipeline (DataLoader num_workers, pin_memory, storage)"),
    RuleSpec("idle_peers", "warning", 300.0, 11, IdlePeers, short="peers", style="bold black on yellow",
             check="only some of the job's GPUs computed: DDP setup, CUDA_VISIBLE_DEVICES, a missing "
                   ".cuda()"),
    RuleSpec("near_oom", "warning", 300.0, 8, NearOom, short="oom", style="bold red",
             check="memory at the limit: batch size, activation checkpointing, or preallocation settings"),
    RuleSpec("clock_skew", "warning", 0.0, 17, short="skew"),
    RuleSpec("over_budget", "warning", 0.0, 20, short="budget"),
    # Slurm (rules/slurm.py): GPUs a running job holds and never runs on (collector/model/allocation.py)
    RuleSpec("allocated_unused", "warning", 600.0, 21, flag="unused", style="bold black on yellow",
             colour="#c9a227", waste=True, user=True, note="is allocated to your Slurm job but unused",
             check="the job held GPUs it never ran on: ask for fewer (--gres=gpu:N) or make each rank use "
                   "its own GPU (srun, torchrun --nproc-per-node, CUDA_VISIBLE_DEVICES)"),
)

BY_NAME: Final[Mapping[str, RuleSpec]] = {r.name: r for r in RULES}
BY_FLAG: Final[Mapping[str, RuleSpec]] = {r.flag_name: r for r in RULES}
#: The flags, the worst first: the order a host's summary line lists them in.
FLAGS: Final[tuple[str, ...]] = tuple(r.flag_name for r in sorted(RULES, key=lambda r: r.rank))
#: Flags that mean "held but not used".
WASTE_FLAGS: Final[frozenset[str]] = frozenset(r.flag_name for r in RULES if r.waste)
#: Rules whose alerts name one user's processes.
USER_RULES: Final[frozenset[str]] = frozenset(r.name for r in RULES if r.user)
#: Parameters the config reads as durations (seconds), whichever rule has them.
DURATION_PARAMS: Final[frozenset[str]] = frozenset(
    {"for", "keep_firing_for"}.union(*(r.params.durations() for r in RULES)))

#: short form -> the flag it stands for, where they differ (a screen's legend)
SHORT_FLAGS: Final[Mapping[str, str]] = {r.short_name: r.flag_name for r in RULES if r.short}

assert len(BY_NAME) == len(BY_FLAG) == len({r.rank for r in RULES}) == len(RULES), "names, flags, ranks"
assert len({r.short_name for r in RULES} | set(BY_FLAG)) == len(RULES) + len(SHORT_FLAGS), "short forms"


def spec(rule: str) -> RuleSpec:
    """The rule's spec (KeyError for a name no rule has)."""
    return BY_NAME[rule]


def default_params() -> dict[str, dict[str, Any]]:
    """Rule name -> its config defaults (a fresh copy each call: callers may change theirs)."""
    return {r.name: r.defaults() for r in RULES}


def flag_name(rule: str) -> str:
    """The flag a person reads for a rule (``overheating`` -> ``hot``); a rule this collector does not know
    (a newer collector's, in a merged view) shows under its own name."""
    known = BY_NAME.get(rule)
    return known.flag_name if known is not None else rule


def rule_of(name: str) -> str:
    """The rule a flag or a rule name means (``hot`` -> ``overheating``; anything else as it is)."""
    known = BY_FLAG.get(name)
    return known.name if known is not None else name


def flag_rank(flag: str) -> int:
    """Where a flag sorts, the worst first; flags this collector does not know go last."""
    known = BY_FLAG.get(flag)
    return known.rank if known is not None else len(RULES)


def short_flag(flag: str) -> str:
    """The flag's short form, for a column too narrow for its name (``idle_peers`` -> ``peers``)."""
    known = BY_FLAG.get(flag)
    return known.short_name if known is not None else flag


def flag_style(flag: str) -> str:
    known = BY_FLAG.get(flag)
    return known.style if known is not None else "bold"


def worst_first(flags: set[str] | frozenset[str] | list[str]) -> list[str]:
    """The flags in display order: by rank, unknown ones last by name."""
    return sorted(flags, key=lambda f: (flag_rank(f), f))


def for_the_page() -> dict[str, Any]:
    """What the web page needs of the catalog (sent in its model): the flags in order with their colours,
    the severities lowest first, and which flags count as waste."""
    return {"flags": [[f, BY_FLAG[f].colour] for f in FLAGS], "severities": list(SEVERITIES),
            "waste": sorted(WASTE_FLAGS)}

