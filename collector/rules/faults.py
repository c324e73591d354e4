"""Fault rules: GPU lost (or driver broken), Xid events, uncorrectable ECC errors.

- gpu_lost: a GPU sample with ``error`` set, a ``gpu_lost`` event, a ``driver_error`` event (host-level, e.g.
  a driver/library version mismatch after an unattended upgrade), or a GPU listed in ``hello`` that is missing
  from the snapshot. Clears when that GPU reports normally again (driver error: when any GPU does).
- xid: one alert per (GPU, Xid code). Critical Xids (wire.CRITICAL_XIDS) are critical, ``warning_xids``
  warnings, others (usually the application's own fault, e.g. 13, 31, 43) info. Clears ``hold`` seconds after
  the last occurrence.
- ecc: volatile uncorrectable count > 0 (counted since the driver loaded, so it only clears on a driver
  reload / GPU reset).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules import catalog
from gpufleet.collector.rules.base import Condition, HostContext, Rule, TickRule
from gpufleet.collector.rules.wording import gpu_labels, safe
from gpufleet.collector.settings import RuleConfig
from gpufleet.collector.units import fmt_duration

XID_MEANING: dict[int, str] = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup", 48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
    119: "GSP RPC timeout", 120: "GSP error", 121: "corrected C2C link errors",
    140: "unrecovered ECC error", 143: "GPU initialization failure", 154: "GPU recovery action changed",
    155: "NVLink software-defined error", 156: "resource retirement", 158: "GPU fatal timeout",
    163: "power smoothing disengaged", 167: "PCIe fatal timeout", 169: "internal micro-controller halt",
    172: "SRAM/DRAM detail of an Xid 48", 173: "C2C fatal link failure",
}
DRIVER = "driver"
#: The agent's warning that a new driver is installed but the old kernel module still runs (an unattended
#: upgrade): the GPUs still answer, so a healthy snapshot must not clear it; a changed driver version does.
PENDING_PREFIX = "driver/library version mismatch pending"


def _uuid(ctx: HostContext, uuid: str | None, index: int | None) -> str | None:
    """The GPU's uuid, from the agent's own or else from the index (events may carry only the index)."""
    return uuid or (ctx.uuids.get(index) if index is not None else None)


@dataclass(slots=True)
class _Lost:
    since: float
    message: str
    index: int | None
    uuid: str | None
    driver_version: str | None = None  # for a pending mismatch: the loaded driver when it was reported


class GpuLostRule(Rule):
    name = "gpu_lost"

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._lost: dict[str, dict[str, _Lost]] = {}  # host -> key (uuid or #index or "driver") -> fact

    @staticmethod
    def _key(uuid: str | None, index: int | None) -> str:
        return uuid if uuid else f"#{index}"

    def observe_event(self, ctx: HostContext, event: wire.Event, now: float) -> bool:
        lost = self._lost.setdefault(ctx.name, {})
        one_gpu = event.gpu_index is not None or bool(event.uuid)
        if event.kind in ("gpu_lost", "gpu_hung") or (event.kind == "driver_error" and one_gpu):
            uuid = _uuid(ctx, event.uuid, event.gpu_index)
            default = ("driver error" if event.kind == "driver_error"
                       else "an NVML read does not return" if event.kind == "gpu_hung" else "GPU is lost")
            lost.setdefault(self._key(uuid, event.gpu_index),
                            _Lost(now, event.message or default, event.gpu_index, uuid))
            return True
        if event.kind == "driver_error":
            if event.message.startswith(PENDING_PREFIX):
                loaded = ctx.hello.driver_version if ctx.hello is not None else None
                lost.setdefault(DRIVER, _Lost(now, event.message, None, None, loaded))
            else:
                lost.setdefault(DRIVER, _Lost(now, event.message or "driver error", None, None))
            return True
        return False

    def observe_snapshot(self, ctx: HostContext, snapshot: sample.Snapshot, now: float) -> None:
        lost = self._lost.get(ctx.name)
        if not lost:
            return
        healthy = [g for g in snapshot.gpus if not g.error]
        for g in healthy:
            lost.pop(g.uuid, None)
            lost.pop(f"#{g.index}", None)
        driver = lost.get(DRIVER)
        if healthy and driver is not None:
            pending = driver.message.startswith(PENDING_PREFIX)
            loaded = ctx.hello.driver_version if ctx.hello is not None else None
            if not pending or loaded != driver.driver_version:
                del lost[DRIVER]

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        lost = self._lost.get(ctx.name, {})
        if ctx.snapshot is None and not lost:
            return None
        out: dict[str, Condition] = {}
        reported: set[str] = set()
        if ctx.snapshot is not None:
            for g in ctx.snapshot.gpus:
                reported.add(g.uuid)
                if g.error and g.fault != "unreadable":  # unreadable: the agent may not open it, it is fine
                    out[g.uuid] = self._gpu(ctx.name, g.index, g.uuid, g.error, g.fault == "hung")
            hello = ctx.hello
            for info in hello.gpus if hello is not None else []:
                if info.uuid not in reported and info.uuid not in out:
                    out[info.uuid] = self._gpu(ctx.name, info.index, info.uuid, "missing from the snapshot")
        for key, fact in lost.items():
            if key == DRIVER:
                out[key] = Condition(
                    self.name, {"host": ctx.name}, f"{ctx.name} driver error: {safe(fact.message)}",
                    "The NVIDIA driver or NVML failed on this host (a driver/library version mismatch after "
                    "an upgrade needs a reboot or module reload).",
                    annotations={"error": safe(fact.message, 300),
                                 **({"loaded_driver": fact.driver_version} if fact.driver_version else {})})
            elif key not in out and (fact.uuid is None or fact.uuid not in out):
                out[key] = self._gpu(ctx.name, fact.index, _uuid(ctx, fact.uuid, fact.index), fact.message)
        return list(out.values())

    def _gpu(self, host: str, index: int | None, uuid: str | None, message: str,
             hung: bool = False) -> Condition:
        labels = {"host": host, "gpu": "" if index is None else str(index)}
        if uuid:
            labels["uuid"] = uuid
        where = "?" if index is None else index
        detail = message.removeprefix("GPU lost: ").removeprefix("GPU hung: ")  # the agent's own prefixes
        if hung:
            return Condition(self.name, labels, f"{host} GPU {where} hung: {safe(detail)}",
                             "An NVML call on this GPU does not return (often after an Xid); the other GPUs "
                             "of the host are still read. It usually needs a reset or a reboot.",
                             annotations={"error": safe(message, 300)})
        return Condition(self.name, labels, f"{host} GPU {where} lost: {safe(detail)}",
                         "The GPU cannot be read (fallen off the bus, driver fault). Jobs on it are likely "
                         "dead; it usually needs a reset or a reboot.",
                         annotations={"error": safe(message, 300)})

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        host, gpu = alert.labels.get("host"), alert.labels.get("gpu")
        if gpu is None:
            return f"{host} driver answers again"
        return f"{host} GPU {gpu} reports normally again after {fmt_duration(now - alert.started_at)}"

    def restore(self, alert: AlertRecord) -> None:
        host = alert.labels.get("host", "")
        gpu = alert.labels.get("gpu")
        uuid = alert.labels.get("uuid")
        index = int(gpu) if gpu and gpu.isdigit() else None
        key = DRIVER if gpu is None else self._key(uuid, index)
        message = alert.annotations.get("error", "GPU is lost")
        loaded = alert.annotations.get("loaded_driver")  # a pending upgrade waits for this to change
        self._lost.setdefault(host, {}).setdefault(key, _Lost(alert.started_at, message, index, uuid, loaded))

    def forget_host(self, host: str) -> None:
        self._lost.pop(host, None)


@dataclass(slots=True)
class _Xid:
    first: float
    last: float
    count: int
    message: str
    index: int | None
    uuid: str | None


class XidRule(TickRule):
    name = "xid"
    p: catalog.Xid

    def __init__(self, config: RuleConfig) -> None:
        super().__init__(config)
        self._seen: dict[str, dict[tuple[str, int], _Xid]] = {}

    def severity_for(self, xid: int) -> str:
        if xid in wire.CRITICAL_XIDS:
            return self.severity
        if xid in self.p.warning_xids:
            return "warning"
        return "info"

    def observe_event(self, ctx: HostContext, event: wire.Event, now: float) -> bool:
        if event.kind != "xid" or event.xid is None:
            return False
        uuid = _uuid(ctx, event.uuid, event.gpu_index)
        key = (uuid or f"#{event.gpu_index}", event.xid)
        seen = self._seen.setdefault(ctx.name, {})
        fact = seen.get(key)
        if fact is None:
            seen[key] = _Xid(now, now, 1, event.message, event.gpu_index, uuid)
        else:
            fact.last, fact.count, fact.message = now, fact.count + 1, event.message or fact.message
        return True

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        seen = self._seen.get(ctx.name, {})
        hold = self.p.hold
        out: list[Condition] = []
        for key, fact in list(seen.items()):
            if now - fact.last >= hold:
                del seen[key]
                continue
            xid = key[1]
            labels = {"host": ctx.name, "gpu": "" if fact.index is None else str(fact.index), "xid": str(xid)}
            if fact.uuid:
                labels["uuid"] = fact.uuid
            meaning = XID_MEANING.get(xid, "see NVIDIA's Xid catalog")
            times = f" ({fact.count} times)" if fact.count > 1 else ""
            where = "?" if fact.index is None else fact.index
            out.append(Condition(
                self.name, labels,
                f"{ctx.name} GPU {where} Xid {xid} ({meaning}){times}",  # the agent's text: annotations
                f"Xid {xid}: {meaning}.",
                value=float(fact.count), severity=self.severity_for(xid),
                annotations={"last_at": f"{fact.last:.3f}", "message": safe(fact.message, 300)},
            ))
        return out

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        hold = fmt_duration(self.p.hold)
        return (f"{alert.labels.get('host')} GPU {alert.labels.get('gpu')}: no Xid {alert.labels.get('xid')} "
                f"for {hold}")

    def restore(self, alert: AlertRecord) -> None:
        try:
            xid = int(alert.labels.get("xid", ""))
            last = float(alert.annotations.get("last_at", alert.updated_at))
        except ValueError:
            return
        gpu = alert.labels.get("gpu")
        index = int(gpu) if gpu and gpu.isdigit() else None
        uuid = alert.labels.get("uuid")
        key = (uuid or f"#{index}", xid)
        count = int(alert.value) if alert.value is not None else 1
        self._seen.setdefault(alert.labels.get("host", ""), {}).setdefault(
            key, _Xid(alert.started_at, last, count, alert.annotations.get("message", ""), index, uuid))

    def forget_host(self, host: str) -> None:
        self._seen.pop(host, None)


class EccRule(Rule):
    name = "ecc"

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        def judge(g: sample.GpuSample) -> Condition | None:
            errors = g.ecc_uncorrected
            if g.error or not errors:
                return None
            return Condition(
                self.name, gpu_labels(ctx.name, g),
                f"{ctx.name} GPU {g.index} has {errors} uncorrectable ECC error{'s' if errors != 1 else ''} "
                "since the driver loaded",
                "Uncorrectable memory errors corrupt results; drain the GPU and reset it (pages are "
                "retired or rows remapped on reset). Repeated errors mean an RMA.",
                value=float(errors),
                annotations={"ecc_corrected": "" if g.ecc_corrected is None else str(g.ecc_corrected)})

        return self.each_gpu(ctx, judge)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return (f"{alert.labels.get('host')} GPU {alert.labels.get('gpu')} ECC counters clear "
                "(driver reloaded or GPU reset)")
