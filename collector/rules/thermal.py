"""Thermal rules: overheating (a fixed threshold, or the GPU's slowdown threshold if lower), throttling."""

from __future__ import annotations

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule, find_gpu
from gpufleet.collector.rules.wording import DURATION, gpu_labels
from gpufleet.collector.settings import RuleConfig


class OverheatingRule(Rule):
    name = "overheating"
    p: catalog.Overheating

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        #: host -> (the hello read, its GPUs' slowdown thresholds by uuid): a snapshot's GPUs look theirs up
        #: in a dict, not by a scan of the hello's GPUs each
        self._hello_slowdowns: dict[str, tuple[wire.Hello, dict[str, int | None]]] = {}

    def _slowdown(self, ctx: HostContext, g: sample.GpuSample) -> int | None:
        if g.temp_slowdown is not None:
            return g.temp_slowdown
        hello = ctx.hello
        if hello is None:
            return None
        known = self._hello_slowdowns.get(ctx.name)
        if known is None or known[0] is not hello:
            by_uuid: dict[str, int | None] = {}
            for info in hello.gpus:
                by_uuid.setdefault(info.uuid, info.temp_slowdown)  # the first GPU of a uuid, as before
            known = self._hello_slowdowns[ctx.name] = (hello, by_uuid)
        return known[1].get(g.uuid)

    def forget_host(self, host: str) -> None:
        super().forget_host(host)
        self._hello_slowdowns.pop(host, None)

    def threshold(self, ctx: HostContext, g: sample.GpuSample) -> int:
        limit = self.p.temp_at_least
        slowdown = self._slowdown(ctx, g)
        return min(limit, slowdown) if slowdown is not None and slowdown > 0 else limit

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        out: list[Condition] = []
        for g in ctx.snapshot.gpus:
            if g.error or g.temperature is None:
                continue
            limit = self.threshold(ctx, g)
            if g.temperature >= limit:
                out.append(Condition(
                    self.name, gpu_labels(ctx.name, g),
                    f"{ctx.name} GPU {g.index} at {g.temperature}°C (threshold {limit}°C) for {DURATION}",
                    "Check cooling (fans, airflow, ambient); the GPU slows itself down near its slowdown "
                    "temperature and shuts down at its shutdown temperature.",
                    value=float(g.temperature),
                    annotations={"threshold": str(limit)},
                ))
        return out

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        g = find_gpu(ctx, alert.labels)
        temp = f"{g.temperature}°C" if g is not None and g.temperature is not None else "normal"
        return f"{alert.labels.get('host')} GPU {alert.labels.get('gpu')} back to {temp}"


class ThrottlingRule(Rule):
    name = "throttling"
    p: catalog.Throttling

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        if ctx.snapshot is None:
            return None
        watched = set(self.p.reasons)
        out: list[Condition] = []
        for g in ctx.snapshot.gpus:
            active = sorted(watched.intersection(g.throttle_reasons or []))
            if g.error or not active:
                continue
            reasons = ", ".join(active)
            out.append(Condition(
                self.name, gpu_labels(ctx.name, g),
                f"{ctx.name} GPU {g.index} throttled ({reasons}) for {DURATION}",
                "Clocks are being held down by the GPU: thermal reasons mean cooling, power brake means the "
                "board's power supply asked it to slow down.",
                value=float(len(active)),
                annotations={"reasons": reasons},
            ))
        return out

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return f"{alert.labels.get('host')} GPU {alert.labels.get('gpu')} no longer throttled"
