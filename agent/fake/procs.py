"""Process attribution for ``--fake``: who runs each fake PID, answered from the scenario, so the agent's
process path (user, command, start time, container) runs on any machine without reading /proc."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.agent.procinfo import ProcInfo

if TYPE_CHECKING:
    from gpufleet.agent.fake.nvml import FakeNvml


class FakeProcs:
    """Process attribution answered from the scenario, so ``--fake`` works on any machine."""

    def __init__(self, lib: FakeNvml) -> None:
        self.lib = lib

    def lookup(self, pid: int) -> ProcInfo:
        t = self.lib.elapsed()
        for gpu in self.lib.scenario.gpus:
            for p in gpu.processes:
                if p.pid != pid or not p.present(t):
                    continue
                if p.hidden:
                    return ProcInfo(pid, status="denied")
                start = p.start_at if p.start_at is not None else p.start_offset_s
                state = "Z" if p.zombie(t) else p.state
                return ProcInfo(
                    pid,
                    user=p.user,
                    uid=p.uid,
                    command=p.command,
                    start_time=self.lib.wall0 + start,
                    state=state,
                    ppid=p.ppid,
                    container=p.container,
                    pod=p.pod,
                    job=p.job,
                )
        return ProcInfo(pid, status="missing")

    def hides_pids(self) -> bool:
        return False

    def forget(self, live_pids: set[int]) -> None:
        return None
