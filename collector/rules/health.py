"""gpu_health: what NVML itself says a GPU needs, beyond its error counters (issue 32, item 12).

- The GPU recovery action (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, r550+ drivers; the agent sends
  it as ``recovery_action``): after an uncorrectable error the driver says whether the GPU needs a reset, the
  node a reboot, or peer-to-peer traffic a drain (NVIDIA, "GPU Memory Error Management: Error Recovery and
  Response Flags"). Xid 154 announces a change of it.
- Row remapping (A100 and later): a remap pending until the next GPU reset, or a remap that failed, which
  is NVIDIA's RMA criterion for the board.

One alert per GPU naming everything it needs, at the severity of the worst need. It clears when the agent
reports the GPU healthy again (after the reset or reboot it asked for).
"""

from __future__ import annotations

from typing import Final

from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.base import Condition, HostContext, Rule
from gpufleet.collector.rules.wording import gpu_labels

#: recovery action (the agent's name for nvmlDeviceGpuRecoveryAction_t) -> (severity, what to do)
RECOVERY: Final[dict[str, tuple[str, str]]] = {
    "gpu_reset": ("critical", "reset the GPU (stop its processes, then nvidia-smi -r; `gpufleet maintenance "
                              "start` frees it from the agent)"),
    "node_reboot": ("critical", "reboot the node (the fault may have left the OS in an inconsistent state)"),
    "drain_p2p": ("warning", "drain peer-to-peer traffic (let running jobs finish; start no multi-GPU work)"),
    "drain_and_reset": ("critical", "drain peer-to-peer traffic, then reset the GPU"),
    "recover_imex_domain": ("critical", "recover the IMEX domain (the NVLink fabric)"),
    "bus_reset": ("critical", "reset the GPU's PCIe bus"),
    "system_reboot": ("critical", "reboot the system"),
}


class GpuHealthRule(Rule):
    name = "gpu_health"

    def conditions(self, ctx: HostContext, now: float) -> list[Condition] | None:
        def judge(g: sample.GpuSample) -> Condition | None:
            if g.error:
                return None
            needs: list[tuple[str, str]] = []
            action = g.recovery_action
            if action and action != "none":
                needs.append(RECOVERY.get(action, ("critical", f"NVML recovery action {action}")))
            if g.remap_failed:
                needs.append(("critical", "row remapping failed: the board should be replaced (RMA)"))
            elif g.remap_pending:
                needs.append(("warning", "a row remap waits for the next GPU reset: reset it when free"))
            if not needs:
                return None
            severity = "critical" if any(s == "critical" for s, _ in needs) else "warning"
            what = "; ".join(text for _, text in needs)
            return Condition(
                self.name, gpu_labels(ctx.name, g), f"{ctx.name} GPU {g.index} needs attention: {what}",
                "NVML reports that this GPU needs a reset, a reboot, a drain or a replacement; jobs on it "
                "may fail or compute wrong results until then.",
                severity=severity,
                annotations={"recovery_action": action or "",
                             "remapped_rows": f"{g.remapped_correctable or 0} correctable, "
                                              f"{g.remapped_uncorrectable or 0} uncorrectable"})

        return self.each_gpu(ctx, judge)

    def resolved_message(self, alert: AlertRecord, ctx: HostContext | None, now: float) -> str:
        return f"{alert.labels.get('host')} GPU {alert.labels.get('gpu')} reports healthy again"
