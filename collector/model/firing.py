"""Which rules fire on which GPU and host: the one answer every reader of "flags" takes.

Built once from a list of alerts (the engine's, or the store's when the collector is down), it answers the
status views (a GPU's flags, a host's own flags), the metrics (every GPU with a firing rule), the job
records (the diagnoses seen on a job's GPUs) and the tests. Only firing alerts count; an alert is a GPU's
when it carries a ``gpu`` label, each listed GPU's when it carries a ``gpus`` label instead (a Slurm job's
unused GPUs, ``0-1``: collector/model/gpulist.py), the host's own (down, an Xid without a GPU) when it
carries neither.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.collector.model.gpulist import parse_indexes
from gpufleet.collector.model.records import AlertRecord

_NONE: frozenset[str] = frozenset()


class Firing:
    """Firing rules by (host, GPU index) and by host, from one pass over the alerts."""

    __slots__ = ("_by_gpu", "_by_host", "_anywhere")

    def __init__(self, alerts: Iterable[AlertRecord] = ()) -> None:
        self._by_gpu: dict[tuple[str, int], set[str]] = {}
        self._by_host: dict[str, set[str]] = {}  # alerts about the host itself (no gpu label)
        self._anywhere: dict[str, set[str]] = {}  # every rule firing on the host, on a GPU or not
        for a in alerts:
            host = a.labels.get("host")
            if a.state != "firing" or host is None:
                continue
            self._anywhere.setdefault(host, set()).add(a.rule)
            gpu, gpus = a.labels.get("gpu"), a.labels.get("gpus")
            if gpu is None and gpus is None:
                self._by_host.setdefault(host, set()).add(a.rule)
            elif gpu is not None:
                if gpu.isdigit():
                    self._by_gpu.setdefault((host, int(gpu)), set()).add(a.rule)
            else:
                for index in parse_indexes(gpus or ""):
                    self._by_gpu.setdefault((host, index), set()).add(a.rule)

    def on(self, host: str, gpu: int | None) -> set[str] | frozenset[str]:
        """The rules firing on that GPU, or with ``gpu`` None on the host itself (not its GPUs)."""
        if gpu is None:
            return self._by_host.get(host, _NONE)
        return self._by_gpu.get((host, gpu), _NONE)

    def __call__(self, host: str, gpu: int | None) -> set[str] | frozenset[str]:
        return self.on(host, gpu)

    def gpus(self) -> dict[tuple[str, int], set[str]]:
        """(host, GPU index) -> its firing rules, for every GPU with one (the caller's to keep)."""
        return {key: set(rules) for key, rules in self._by_gpu.items()}

    def anywhere(self, host: str) -> set[str] | frozenset[str]:
        """Every rule firing on the host, on one of its GPUs or on the host itself."""
        return self._anywhere.get(host, _NONE)
