"""The collector's settings as typed dataclasses: what the rest of the collector reads.

Loading and validation (YAML with file:line errors) live in :mod:`gpufleet.collector.config`; this module is
only the shape and the defaults, so every other module can depend on it without touching YAML.
Durations are seconds (float); the YAML accepts ``90s``, ``30m``, ``2h``, ``7d``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpufleet.collector.addresses import CollectorAddress
from gpufleet.collector.rules import catalog
from gpufleet.collector.shards import Shard

HostKeyPolicy = Literal["strict", "accept-new"]
TransportKind = Literal["ssh", "local"]
AgentMode = Literal["installed", "upload"]
NotifierKind = Literal["apprise", "webhook", "alertmanager", "command"]


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/gpufleet (or ~/.local/share/gpufleet); $STATE_DIRECTORY under systemd."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet"


def default_runtime_dir() -> Path:
    """Where the query socket lives: $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/gpufleet, or the data dir."""
    if os.environ.get("RUNTIME_DIRECTORY"):
        return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "gpufleet"
    return default_data_dir()


def find_config() -> Path | None:
    """$GPUFLEET_CONFIG, ./gpufleet.yaml, ~/.config/gpufleet/gpufleet.yaml, /etc/gpufleet/gpufleet.yaml.

    $GPUFLEET_CONFIG is returned even when missing, so loading it reports the mistake.
    """
    explicit = os.environ.get("GPUFLEET_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for candidate in (Path("gpufleet.yaml"), Path(xdg) / "gpufleet" / "gpufleet.yaml",
                      Path("/etc/gpufleet/gpufleet.yaml")):
        if candidate.is_file():
            return candidate
    return None


#: Seconds: a frame stamped further than this from the collector's receive time is re-stamped with the
#: collector's clock and the host is flagged ``clock_skew`` (collector/transport/stream.py); per host (or in
#: ``defaults:``) as ``max_clock_skew``.
DEFAULT_MAX_CLOCK_SKEW = 5.0
#: Seconds a time the store writes may lie ahead of its own clock (collector/store/admit.py): anything later
#: is refused there. Also the most ``max_clock_skew`` may be, so no frame the stream lets through is refused.
MAX_CLOCK_AHEAD = 600.0


@dataclass(slots=True)
class HostBudget:
    """What one host may send (collector/transport/budget.py; a host's or the defaults' ``budget:``).
    A normal 8-GPU host sends ~10 KB and no events a second."""

    bytes_per_second: float = 4 << 20
    bytes_burst: float = 16 << 20  # at least two maximal lines (max_line_bytes)
    events_per_second: float = 20.0
    events_burst: float = 200.0
    max_gpus: int = 256  # GPUs in one frame, and distinct GPU UUIDs on one connection: more is refused
    max_event_message: int = 4096  # characters of an event's message kept
    summary_interval: float = 10.0  # at most one "dropped over budget" event per host this often


@dataclass(slots=True)
class HostConfig:
    """One GPU host. ``name`` is the identity used everywhere (never what the agent claims)."""

    name: str
    address: str = ""  # defaults to name
    port: int = 22
    user: str | None = None
    key: str | None = None  # private key file
    jump: str | None = None  # another host's name, or [user@]host[:port]
    tags: list[str] = field(default_factory=list)
    transport: TransportKind = "ssh"
    agent: AgentMode = "installed"
    agent_command: str = "gpufleet-agent"  # for agent: installed
    agent_args: list[str] = field(default_factory=list)  # extra agent args, e.g. ["--fake", "x.yaml"]
    python: str = "python3"  # interpreter for agent: upload
    upload_dir: str = ".cache/gpufleet"  # remote cache dir for the zipapp, relative to home
    interval: float = 1.0  # agent sampling interval
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    host_key_policy: HostKeyPolicy = "strict"
    connect_timeout: float = 10.0
    keepalive_interval: float = 5.0
    keepalive_count_max: int = 3
    read_timeout: float | None = None  # None: 3 * interval + 5 s (no frame -> host down)
    max_line_bytes: int = 1 << 20
    max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW  # beyond it, the collector's clock stamps the frames
    budget: HostBudget = field(default_factory=HostBudget)  # what the host may send (transport/budget.py)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostConfig:
        """Back from ``dataclasses.asdict`` (the simulator prints its hosts that way): nested budget too."""
        budget = d.get("budget")
        return cls(**{**d, "budget": HostBudget(**budget) if isinstance(budget, dict) else HostBudget()})

    @property
    def effective_read_timeout(self) -> float:
        return self.read_timeout if self.read_timeout is not None else 3 * self.interval + 5.0


@dataclass(slots=True)
class StorageConfig:
    path: str = ""  # "" -> default_data_dir()/gpufleet.db
    raw_retention: float = 24 * 3600.0
    minute_retention: float = 30 * 86400.0
    hour_retention: float = 365 * 86400.0
    batch_max_rows: int = 5000
    batch_max_delay: float = 0.5

    def resolved_path(self) -> Path:
        return Path(self.path).expanduser() if self.path else default_data_dir() / "gpufleet.db"


@dataclass(slots=True)
class Selector:
    """Which hosts / GPUs / users a rule applies to. Empty lists match everything; globs allowed."""

    hosts: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    exclude_users: list[str] = field(default_factory=list)


#: Every rule and its default parameters (the rule catalog's, collector/rules/catalog.py). The loader accepts
#: exactly these names per rule, with values of the default's type (durations in seconds), so a typo is an
#: error with file:line.
DEFAULT_RULES: dict[str, dict[str, Any]] = catalog.default_params()

#: Rule parameters that are durations (seconds; the YAML also accepts ``30m``, ``1h30m``).
RULE_DURATION_PARAMS: frozenset[str] = catalog.DURATION_PARAMS

#: Alert severities, lowest first (``min_severity`` compares by this order).
SEVERITIES: tuple[str, ...] = catalog.SEVERITIES


@dataclass(slots=True)
class RuleConfig:
    name: str
    enabled: bool = True
    params: dict[str, Any] = field(default_factory=dict)  # DEFAULT_RULES[name] overlaid with the config
    select: Selector = field(default_factory=Selector)

    def __post_init__(self) -> None:
        # the catalog's defaults under what was given, so a hand-built RuleConfig reads like a loaded one
        known = catalog.BY_NAME.get(self.name)
        if known is not None:
            self.params = {**known.defaults(), **self.params}

    @property
    def for_seconds(self) -> float:
        return float(self.params["for"])

    @property
    def severity(self) -> str:
        return str(self.params["severity"])

    @property
    def keep_firing_for(self) -> float:
        """Once firing, a condition that clears keeps the alert firing this long (damps a flapping host)."""
        return float(self.params["keep_firing_for"])


@dataclass(slots=True)
class NotifierConfig:
    name: str
    kind: NotifierKind
    urls: list[str] = field(default_factory=list)  # apprise URLs, webhook URL, alertmanager base URL
    command: list[str] = field(default_factory=list)  # for kind: command (argv, alert JSON on stdin)
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    retries: int = 3
    rules: list[str] = field(default_factory=list)  # only these rules (empty: all)
    min_severity: str = "info"
    send_resolved: bool = True


@dataclass(slots=True)
class AlertingConfig:
    group_by: list[str] = field(default_factory=lambda: ["host", "rule"])
    group_wait: float = 30.0
    group_interval: float = 300.0
    repeat_interval: float = 4 * 3600.0
    queue_size: int = 1000
    notify_users: bool = False  # also notify the wasting user directly
    user_email_domain: str | None = None  # alice -> alice@domain
    user_emails: dict[str, str] = field(default_factory=dict)
    user_notifier: str | None = None  # apprise mailto:// base for user mail
    retry_backoff: float = 1.0  # first retry of a failed notification after this; doubling per failure
    retry_backoff_max: float = 300.0  # ... up to this; retried until delivered or superseded
    notifier_down_after: float = 600.0  # a destination failing this long raises notifier_down elsewhere
    job_notes: bool = False  # mail users their job's record when it releases its GPUs (notify/jobnotes.py)
    job_notes_min_gpu_hours: float = 0.1  # ... for jobs that held at least this many GPU-hours


@dataclass(slots=True)
class ApiConfig:
    socket: str = ""  # "" -> default_runtime_dir()/gpufleet.sock
    mode: int = 0o600
    group: str | None = None  # the socket's group: it may connect (0660) and read (faces/api/access.py)
    admins: list[str] = field(default_factory=list)  # user names and @groups who may silence anything

    def resolved_socket(self) -> Path:
        return Path(self.socket).expanduser() if self.socket else default_runtime_dir() / "gpufleet.sock"


@dataclass(slots=True)
class MetricsConfig:
    listen: str | None = None  # "127.0.0.1:9835"; None: off
    dcgm_names: bool = False  # also export dcgm-exporter's DCGM_FI_DEV_* series (faces/metrics/dcgm.py)


#: Where the web page listens unless ``web.listen`` says otherwise (the metrics port's neighbour).
DEFAULT_WEB_LISTEN = "127.0.0.1:9836"


@dataclass(slots=True)
class WebConfig:
    """The read-only web page (collector/faces/web). Off by default; loopback unless the operator says
    otherwise."""

    enabled: bool = False
    listen: str = DEFAULT_WEB_LISTEN
    token: str | None = field(default=None, repr=False)  # the resolved secret; None: no token asked
    show_commands: bool = True  # False: command lines never leave the collector
    max_clients: int = 32  # open live streams at once; more are refused with 503


#: The most worker processes one collector runs (``workers:``).
MAX_WORKERS = 64


@dataclass(slots=True)
class Config:
    hosts: list[HostConfig] = field(default_factory=list)
    storage: StorageConfig = field(default_factory=StorageConfig)
    rules: dict[str, RuleConfig] = field(default_factory=dict)
    notifiers: list[NotifierConfig] = field(default_factory=list)
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    web: WebConfig = field(default_factory=WebConfig)
    max_concurrent_connects: int = 32  # SSH handshakes at once (CPU-bound); TCP connects are not limited
    max_hosts: int = 10000  # the host list may name no more (ranges are counted before they are expanded)
    shard: Shard | None = None  # several collectors: this one watches shard I of N (collector/shards.py)
    #: worker processes on this machine, each a shard of the hosts (service/workers.py); 1: one process
    workers: int = 1  # 1..MAX_WORKERS
    worker: int | None = None  # this process is worker I of ``workers`` (set by workers.worker_config)
    #: the collectors the CLI asks and merges when no --collector is given (the collector ignores it)
    collectors: list[CollectorAddress] = field(default_factory=list)
    source: str | None = None  # the file it came from
    warnings: list[str] = field(default_factory=list)  # "file:line: key: warning: ...", for config check

    def host(self, name: str) -> HostConfig | None:
        return next((h for h in self.hosts if h.name == name), None)


def default_rules() -> dict[str, RuleConfig]:
    return {name: RuleConfig(name=name, params=dict(params)) for name, params in DEFAULT_RULES.items()}
