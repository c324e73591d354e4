"""duplicate_gpu: the same GPU UUID reported by two hosts at once.

A GPU's identity is (host, uuid) (the store keeps two histories), so a cloned VM image, one machine listed
under two names (``gpu-a`` at 127.0.0.1 and ``gpu-a-alias`` at localhost), or two fake backends never mix
their history. It is still almost always a mistake in the fleet, and every GPU-hour of such a machine is
counted twice, so it is flagged: one alert per UUID, on the last of the reporting hosts in name order,
naming all of them. A GPU moved from one host to another is not flagged: the old host stops reporting it.

Per change (issue 33): a host's snapshot costs a comparison of its UUIDs with its last; when a UUID is
reported by one host only (the normal state) the conditions are none without looking further.
"""

from __future__ import annotations

from gpufleet.collector.model import sample
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.wording import gpu_labels, safe
from gpufleet.collector.settings import RuleConfig


class DuplicateGpuRule(Rule):
    name = "duplicate_gpu"
    p: catalog.DuplicateGpu
    time_based = True  # resolves when the other host stops reporting the UUID, without a frame from this one

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._reported: dict[str, set[str]] = {}  # uuid -> the hosts whose latest snapshot reports it
        self._shared: set[str] = set()  # the UUIDs reported by more than one host
        self._latest: dict[str, set[str]] = {}  # host -> the UUIDs of its latest snapshot
        self._seen: dict[str, float] = {}  # host -> when its latest snapshot came (it reported its UUIDs)

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        host = ctx.name
        latest = self._latest.get(host)
        if latest is not None and len(latest) == len(snapshot.gpus) and all(
                g.uuid in latest for g in snapshot.gpus):
            self._seen[host] = now  # the same GPUs: each was reported again now
            return
        uuids = {g.uuid for g in snapshot.gpus if g.uuid}
        for gone in (latest or set()) - uuids:
            self._drop(gone, host)
        for uuid in uuids:
            reporters = self._reported.setdefault(uuid, set())
            reporters.add(host)
            if len(reporters) > 1:
                self._shared.add(uuid)
        self._latest[host] = uuids
        self._seen[host] = now

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        latest = self._latest.get(ctx.name)
        if not self._shared or not latest or self._shared.isdisjoint(latest):
            return []  # no UUID of this host is reported by another
        window = self.p.window
        out: list[Condition] = []
        for g in ctx.snapshot.gpus:
            reporters = self._reported.get(g.uuid, set())
            fresh = sorted(h for h in reporters if now - self._seen[h] <= window)
            if len(fresh) < 2 or fresh[-1] != ctx.name:
                continue  # not duplicated now, or another host carries the one alert
            names = " and ".join(fresh) if len(fresh) == 2 else ", ".join(fresh)
            out.append(Condition(
                self.name, gpu_labels(ctx.name, g),
                f"GPU {safe(g.uuid, 80)} is reported by {names}",
                "Two hosts report the same GPU: one machine listed under two names or addresses, or hosts "
                "cloned from one image. Their histories are kept apart, but the GPU is counted twice; "
                "remove the duplicate entry from the config (`gpufleet config check` warns about entries "
                "that resolve to the same address).",
                value=float(len(fresh)),
                annotations={"hosts": ",".join(fresh)},
            ))
        return out

    def _drop(self, uuid: str, host: str) -> None:
        reporters = self._reported.get(uuid)
        if reporters is not None:
            reporters.discard(host)
            if len(reporters) < 2:
                self._shared.discard(uuid)
            if not reporters:
                del self._reported[uuid]

    def forget_host(self, host: str) -> None:
        for uuid in self._latest.pop(host, set()):
            self._drop(uuid, host)
        self._seen.pop(host, None)
