"""idle_peers: one job holds several GPUs, on one host or across hosts, but only some of them compute.

A DistributedDataParallel job whose ranks all picked ``cuda:0`` (CUDA_VISIBLE_DEVICES set per rank wrongly,
a missing ``.to(local_rank)`` / ``.cuda()``, a model never wrapped in DDP) leaves its other GPUs allocated
and idle. The job is :func:`gpufleet.collector.model.jobkey.group_key` (Slurm job, container, or one
launcher's ranks); a GPU's activity is :func:`gpufleet.collector.model.classify.activity`, judged over
``window`` seconds so one sample between steps is neither: a GPU *computes* when at least half its samples are
busy, and is an *idle peer* when none is. Stuck GPUs (util high, power idle: a hung collective) are neither;
``wasted`` speaks for them. One condition per idle peer GPU (labels host, gpu, uuid, user, job), on that GPU's
host. Each host's part is kept from its latest snapshot and dropped once the host has not reported for
``3 * interval + 5`` seconds, so a host that went away does not keep a job half-busy. An index (job group ->
hosts) keeps a host's evaluation to its own jobs' hosts, not the fleet.

Per change (issue 33): a GPU's job groups are worked out once per process list (the facts' memo); while
every GPU of a host keeps its processes (and stays judged), a sample adds each GPU's activity to its window
and nothing else, and the groups that can have peers (several GPUs, or several hosts) are listed once per
change of the index, so a host whose every job holds one GPU costs nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.collector.model.classify import user_of
from gpufleet.collector.model.facts import GpuFacts
from gpufleet.collector.model.jobkey import job_label
from gpufleet.collector.model.sample import GpuSample, ProcessSample, Snapshot
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.series import Window
from gpufleet.collector.rules.wording import DURATION, gpu_labels, safe, short_command, slurm_annotations
from gpufleet.collector.settings import RuleConfig


@dataclass(slots=True)
class _PeerGpu:
    window: Window[str]  # activity per sample: busy | idle | stuck
    sample: GpuSample
    groups: dict[str, list[ProcessSample]] = field(default_factory=dict)  # job group -> its processes
    counts: dict[str, int] = field(default_factory=dict)  # activity -> samples in the window

    def add(self, ts: float, kind: str) -> None:
        dropped = self.window.add(ts, kind)
        if dropped is not None:
            counts = self.counts
            counts[kind] = counts.get(kind, 0) + 1
            for old in dropped:
                counts[old] -= 1

    def computes(self) -> bool:
        return self.counts.get("busy", 0) * 2 >= len(self.window) > 0

    def idles(self) -> bool:
        return self.counts.get("idle", 0) == len(self.window) > 0


@dataclass(slots=True)
class _HostPart:
    seen: float
    keep_for: float
    gpus: dict[str, _PeerGpu] = field(default_factory=dict)  # uuid -> GPU
    by_group: dict[str, list[_PeerGpu]] = field(default_factory=dict)  # job group -> its GPUs here
    rosters: list[object] = field(default_factory=list)  # each judged GPU's facts roster, in order
    #: the groups that may have peers (conditions), and the index version they were listed at
    candidates: list[str] = field(default_factory=list)
    listed_at: int = -1


def _groups(gf: GpuFacts) -> dict[str, list[ProcessSample]]:
    """Job group -> its processes holding the GPU, once per process list (the facts' memo)."""
    groups: dict[str, list[ProcessSample]] | None = gf.memo.get("peer_groups")
    if groups is None:
        groups = gf.memo["peer_groups"] = {}
        keys = gf.groups
        for procs in gf.holders.values():
            for p in procs:
                groups.setdefault(keys[p.pid], []).append(p)
    return groups


class IdlePeersRule(Rule):
    name = "idle_peers"
    p: catalog.IdlePeers
    reads_processes = True

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._hosts: dict[str, _HostPart] = {}
        self._members: dict[str, set[str]] = {}  # job group -> the hosts where it holds GPUs
        self._version = 0  # bumped when a group comes to be on more hosts than one, or no longer is

    def observe_snapshot(self, ctx: HostContext, snapshot: Snapshot, now: float) -> None:
        gpus = self.facts(ctx, snapshot).gpus
        old = self._hosts.get(ctx.name)
        if old is not None and len(old.rosters) == len(gpus) and all(
                gf.activity is not None and gf.roster is roster
                for gf, roster in zip(gpus, old.rosters, strict=True)):
            old.seen, old.keep_for = now, 3 * ctx.interval + 5.0  # the same GPUs, the same processes
            for gf, peer in zip(gpus, old.gpus.values(), strict=True):
                peer.sample = gf.gpu
                peer.add(now, gf.activity or "")  # judged (checked above): never None
            return
        span = self.p.window
        part = self._hosts[ctx.name] = _HostPart(now, 3 * ctx.interval + 5.0)
        for gf in gpus:
            g, kind = gf.gpu, gf.activity
            if kind is None:
                continue
            prev = old.gpus.get(g.uuid) if old is not None else None
            peer = prev or _PeerGpu(Window(span), g)
            peer.sample, peer.groups = g, _groups(gf)
            peer.add(now, kind)
            part.gpus[g.uuid] = peer
            part.rosters.append(gf.roster)
            for key in peer.groups:
                part.by_group.setdefault(key, []).append(peer)
        self._index(ctx.name, old, part)

    def _index(self, host: str, old: _HostPart | None, new: _HostPart | None) -> None:
        before = old.by_group.keys() if old is not None else set()
        after = new.by_group.keys() if new is not None else set()
        if before == after:
            return  # the same jobs as a sample ago: nothing to move (most samples)
        for key in before - after:
            hosts = self._members.get(key)
            if hosts is not None:
                hosts.discard(host)
                if len(hosts) == 1:
                    self._version += 1  # one host's group now: its candidates may change
                if not hosts:
                    del self._members[key]
        for key in after - before:
            hosts = self._members.setdefault(key, set())
            hosts.add(host)
            if len(hosts) == 2:
                self._version += 1  # on two hosts now

    def _drop(self, host: str) -> None:
        self._index(host, self._hosts.pop(host, None), None)

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        mine = self._hosts.get(ctx.name)
        if ctx.snapshot is None or mine is None:
            return None
        min_gpus = self.p.min_gpus
        if mine.listed_at != self._version:
            mine.listed_at = self._version
            mine.candidates = [key for key, here in mine.by_group.items()
                               if not (len(self._members.get(key, ())) == 1 and len(here) < min_gpus)]
        # job group -> every (host, GPU) it holds, across hosts
        members: dict[str, list[tuple[str, _PeerGpu]]] = {}
        for key in mine.candidates:  # not one GPU of one host: those have no peers (a job per GPU)
            hosts = self._members.get(key, ())
            gpus = members[key] = []
            for host in sorted(hosts):
                part = self._hosts.get(host)
                if part is None or now - part.seen > part.keep_for:
                    self._drop(host)  # gone quiet
                    continue
                gpus.extend((host, peer) for peer in part.by_group.get(key, ()))
        out: list[Condition] = []
        for key, gpus in sorted(members.items()):
            if len(gpus) < min_gpus or not all(peer.window.full() for _, peer in gpus):
                continue
            computing = [(h, p) for h, p in gpus if p.computes()]
            idle = [(h, p) for h, p in gpus if p.idles()]
            if not computing or not idle:
                continue
            for host, peer in idle:
                if host == ctx.name:
                    out.append(self._condition(ctx.name, key, peer, len(gpus), computing))
        return out

    def _condition(self, host: str, key: str, peer: _PeerGpu, held: int,
                   computing: list[tuple[str, _PeerGpu]]) -> Condition:
        g = peer.sample
        procs = peer.groups[key]
        p = procs[0]
        user = user_of(p)
        busy = ", ".join(f"{h} GPU {q.sample.index}" for h, q in computing[:4])
        more = f" and {len(computing) - 4} more" if len(computing) > 4 else ""
        job = job_label(key)
        if p.job and p.job_name and key.startswith("slurm:"):
            job = f"{job} {safe(p.job_name, 60)}"
        summary = (f"{user}'s {job} ({short_command(p.command)}) holds {held} GPUs but only {len(computing)} "
                   f"compute{'s' if len(computing) == 1 else ''} ({busy}{more}); {host} GPU {g.index} idle "
                   f"for {DURATION}")
        description = (
            "One job holds these GPUs but only some do any work; the idle ones are allocated and wasted. "
            "What to check: the distributed setup. Each rank must use its own device "
            "(torch.cuda.set_device(local_rank), model.to(local_rank), DDP(model, device_ids=[local_rank])); "
            "CUDA_VISIBLE_DEVICES must not hide or repeat devices per rank; a missing .cuda() / .to(device) "
            "leaves a rank's work on the CPU; or the job asked for more GPUs than the code uses (--gpus, "
            "--nproc_per_node)."
        )
        labels = {**gpu_labels(host, g), "user": user, "job": key}
        annotations = {"pid": ",".join(str(q.pid) for q in procs), "gpus_held": str(held),
                       "gpus_computing": str(len(computing)), "computing": busy, **slurm_annotations(procs)}
        return Condition(self.name, labels, summary, description, value=float(held - len(computing)),
                         annotations=annotations)

    def forget_host(self, host: str) -> None:
        self._drop(host)
