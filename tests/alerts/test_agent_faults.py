"""What the collector makes of the agent's 1.2 fault marks (issue 32): a process list the agent could not
read is "unknown", never "no process"; a GPU the agent may not open is not lost; a hung GPU is."""

from __future__ import annotations

from gpufleet.agent import wire


def unknown(w, index: int = 2, **kw):  # type: ignore[no-untyped-def]
    """A GPU whose process list NVML refused this sample: readings fine, ``processes`` empty and unknown."""
    return w.gpu(index, util=2, mem_used_gib=40, processes_error="NVML_ERROR_UNKNOWN", **kw)


async def test_an_unknown_process_list_neither_resolves_nor_starts_alerts(harness, clock, w):
    h = harness()
    rec = h.notifiers[0]
    await h.engine.start(run_tick=False)
    t0 = clock.t
    h.up()
    wasted = w.snap(w.gpu(2, util=2, procs=[w.proc(4242)]))
    for i in range(0, 1860, 60):
        clock.t = t0 + i
        h.send(wasted)
        await h.tick()
    [alert] = h.engine.active()
    assert alert.rule == "wasted" and alert.state == "firing"
    sent = len(rec.got)
    for i in range(1860, 3060, 60):  # 20 minutes in which the agent cannot read the list
        clock.t = t0 + i
        h.send(w.snap(unknown(w)))
        await h.tick()
    assert [(a.rule, a.state) for a in h.engine.active()] == [("wasted", "firing")], (
        "no orphaned_memory (the memory's holder is unknown, not absent), no resolved wasted")
    assert "resolved" not in [n.status for n in rec.got[sent:]]
    assert {a.rule for n in rec.got for a in n.alerts} == {"wasted"}
    clock.t = t0 + 3060
    h.send(w.snap(w.gpu(2, util=0)))  # the list is readable again, and empty: alice left
    await h.tick(t0 + 3100)
    assert rec.got[-1].status == "resolved"


async def test_a_gpu_the_agent_may_not_open_is_not_lost(harness, clock, w):
    h = harness()
    await h.engine.start(run_tick=False)
    h.up()
    unreadable = w.gpu(1, util=None, error="GPU unreadable: cannot open GPU 1: NVML_ERROR_NO_PERMISSION",
                       fault="unreadable")
    for _ in range(3):
        clock.t += 60
        h.send(w.snap(w.gpu(0, util=50), unreadable))
        await h.tick()
    assert h.engine.active() == []


async def test_a_hung_gpu_pages_as_hung(harness, clock, w):
    h = harness()
    await h.engine.start(run_tick=False)
    h.up()
    h.event(wire.Event(ts=clock.t, kind="gpu_hung", gpu_index=1, uuid="GPU-1",
                       message="GPU 1 (GPU-1) has an NVML read that does not return: for 10.2 s"))
    hung = w.gpu(1, util=None, uuid="GPU-1", error="GPU hung: an NVML read has not returned for 10.2 s",
                 fault="hung")
    h.send(w.snap(w.gpu(0, util=50), hung))
    await h.tick()
    [alert] = h.engine.active()
    assert alert.rule == "gpu_lost" and alert.severity == "critical" and alert.state == "firing"
    assert alert.annotations["summary"] == "n3 GPU 1 hung: an NVML read has not returned for 10.2 s"


async def test_nvml_health_pages_with_what_the_gpu_needs(harness, clock, w):
    """The recovery action and row remapping (NVIDIA, "GPU Memory Error Management: Error Recovery and
    Response Flags") reach the operator as one alert per GPU, at the severity of the worst need."""
    h = harness()
    await h.engine.start(run_tick=False)
    h.up()
    pending = w.gpu(0, util=50, remap_pending=True, remapped_uncorrectable=1)
    reset = w.gpu(1, util=0, recovery_action="gpu_reset")
    h.send(w.snap(pending, reset, w.gpu(2, util=10, recovery_action="none")))
    await h.tick()
    got = {a.labels["gpu"]: (a.rule, a.severity, a.annotations["summary"]) for a in h.engine.active()}
    assert got == {
        "0": ("gpu_health", "warning",
              "n3 GPU 0 needs attention: a row remap waits for the next GPU reset: reset it when free"),
        "1": ("gpu_health", "critical", "n3 GPU 1 needs attention: reset the GPU (stop its processes, then "
              "nvidia-smi -r; `gpufleet maintenance start` frees it from the agent)"),
    }
    clock.t += 60
    h.send(w.snap(w.gpu(0, util=50), w.gpu(1, util=0), w.gpu(2, util=10)))  # reset done
    await h.tick()
    assert [a for a in h.engine.active() if a.rule == "gpu_health"] == []
