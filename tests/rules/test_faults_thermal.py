"""overheating / throttling / gpu_lost / xid / ecc / host_down / storage conditions, and selector matching."""

from __future__ import annotations

from gpufleet.agent import wire
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.rules.base import matchers_match, selector_matches
from gpufleet.collector.settings import Selector

from tests.builders import lost_gpu


def test_overheating_uses_the_lower_of_threshold_and_slowdown(runner, w):
    r = runner("overheating")
    assert r.feed(w.snap(w.gpu(0, temperature=84)), 0.0) == []
    conds = r.feed(w.snap(w.gpu(0, temperature=86)), 1.0)
    assert conds and conds[0].value == 86 and "(threshold 85°C)" in conds[0].summary
    # this GPU slows down at 80 C: that is the threshold
    conds = r.feed(w.snap(w.gpu(0, temperature=81, temp_slowdown=80)), 2.0)
    assert conds and "(threshold 80°C)" in conds[0].summary


def test_overheating_slowdown_from_hello(runner, w):
    r = runner("overheating")
    r.ctx.hello = wire.Hello(agent_version="1", hostname="n3", ts=0.0,
                             gpus=[wire.GpuInfo(index=0, uuid="GPU-0000", temp_slowdown=78)])
    assert r.feed(w.snap(w.gpu(0, temperature=79)), 0.0)


def test_overheating_resolved_message_gives_current_temperature(runner, w):
    from gpufleet.collector.model.records import AlertRecord

    r = runner("overheating")
    r.feed(w.snap(w.gpu(0, temperature=71)), 10.0)
    alert = AlertRecord(fingerprint="x", rule="overheating", severity="critical", state="firing",
                        labels={"host": "n3", "gpu": "0", "uuid": "GPU-0000", "rule": "overheating"})
    assert r.rule.resolved_message(alert, r.ctx, 10.0) == "n3 GPU 0 back to 71°C"


def test_throttling_only_watched_reasons(runner, w):
    r = runner("throttling")
    assert r.feed(w.snap(w.gpu(0, throttle_reasons=["gpu_idle", "applications_clocks_setting"])), 0.0) == []
    conds = r.feed(w.snap(w.gpu(0, throttle_reasons=["sw_thermal", "hw_slowdown", "gpu_idle"])), 1.0)
    assert conds and "throttled (hw_slowdown, sw_thermal)" in conds[0].summary


def test_gpu_lost_from_sample_error_and_event_until_normal(runner, w):
    r = runner("gpu_lost")
    conds = r.feed(w.snap(w.gpu(0), lost_gpu(1)), 0.0)
    assert conds and conds[0].labels == {"host": "n3", "gpu": "1", "uuid": "GPU-0001"}
    assert "lost: GPU is lost" in conds[0].summary
    assert r.feed(w.snap(w.gpu(0), w.gpu(1)), 1.0) == []
    # an event: lost until the GPU reports normally again, even if snapshots in between omit it
    r.ctx.uuids[1] = "GPU-0001"
    conds = r.event(wire.Event(ts=2.0, kind="gpu_lost", gpu_index=1, message="fell off the bus"), 2.0)
    assert conds and conds[0].labels["uuid"] == "GPU-0001"
    assert r.feed(w.snap(w.gpu(0)), 3.0), "still lost: GPU 1 has not come back"
    assert r.feed(w.snap(w.gpu(0), w.gpu(1)), 4.0) == []


def test_gpu_missing_from_snapshot_versus_hello(runner, w):
    r = runner("gpu_lost")
    r.ctx.hello = wire.Hello(agent_version="1", hostname="n3", ts=0.0,
                             gpus=[wire.GpuInfo(index=0, uuid="GPU-0000"),
                                   wire.GpuInfo(index=1, uuid="GPU-0001")])
    conds = r.feed(w.snap(w.gpu(0)), 0.0)
    assert conds and conds[0].labels["gpu"] == "1" and "missing from the snapshot" in conds[0].summary


def test_driver_error_is_host_level(runner, w):
    r = runner("gpu_lost")
    r.feed(w.snap(w.gpu(0)), 0.0)
    conds = r.event(wire.Event(ts=1.0, kind="driver_error", message="Driver/library version mismatch"), 1.0)
    assert conds and conds[0].labels == {"host": "n3"}
    assert r.feed(w.snap(w.gpu(0)), 2.0) == []


def test_pending_driver_upgrade_holds_until_the_loaded_driver_changes(runner, w):
    """The GPUs keep answering after an unattended upgrade, so healthy snapshots must not clear it."""
    r = runner("gpu_lost")
    r.ctx.hello = wire.Hello(agent_version="0.1.0", hostname="n3", ts=0.0, driver_version="550.54.15")
    r.feed(w.snap(w.gpu(0)), 0.0)
    message = ("driver/library version mismatch pending: libnvidia-ml 560.35.03 is installed but kernel "
               "module 550.54.15 is loaded")
    conds = r.event(wire.Event(ts=1.0, kind="driver_error", message=message), 1.0)
    assert conds and conds[0].labels == {"host": "n3"} and "560.35.03" in conds[0].summary
    still = r.feed(w.snap(w.gpu(0)), 2.0)
    assert still and still[0].labels == {"host": "n3"}
    r.ctx.hello = wire.Hello(agent_version="0.1.0", hostname="n3", ts=3.0, driver_version="560.35.03")
    assert r.feed(w.snap(w.gpu(0)), 4.0) == []


def test_pending_driver_upgrade_survives_a_collector_restart(runner, w):
    r = runner("gpu_lost")
    hello = wire.Hello(agent_version="0.1.0", hostname="n3", ts=0.0, driver_version="550.54.15")
    r.ctx.hello = hello
    r.feed(w.snap(w.gpu(0)), 0.0)
    message = "driver/library version mismatch pending: libnvidia-ml 560.35.03 is installed"
    [cond] = r.event(wire.Event(ts=1.0, kind="driver_error", message=message), 1.0)
    saved = AlertRecord(fingerprint="f", rule="gpu_lost", severity="critical", state="firing",
                        labels={**cond.labels, "rule": "gpu_lost"}, annotations=dict(cond.annotations),
                        started_at=1.0)
    restarted = runner("gpu_lost")
    restarted.rule.restore(saved)
    restarted.ctx.hello = hello
    assert restarted.feed(w.snap(w.gpu(0)), 5.0), "a healthy snapshot after a restart must not clear it"


def test_xid_severity_and_hold(runner):
    r = runner("xid", hold=100.0)
    r.ctx.uuids[0] = "GPU-0000"
    conds = r.event(wire.Event(ts=0.0, kind="xid", xid=79, gpu_index=0, message="fallen off"), 0.0)
    assert conds and conds[0].severity == "critical" and conds[0].labels["xid"] == "79"
    assert "Xid 79 (GPU has fallen off the bus)" in conds[0].summary
    conds = r.event(wire.Event(ts=50.0, kind="xid", xid=94, gpu_index=0, message="contained"), 50.0)
    assert conds is not None
    assert {c.labels["xid"]: c.severity for c in conds} == {"79": "critical", "94": "warning"}
    conds = r.event(wire.Event(ts=60.0, kind="xid", xid=13, gpu_index=0, message="app"), 60.0)
    assert conds is not None and {c.labels["xid"]: c.severity for c in conds}["13"] == "info"
    r.event(wire.Event(ts=90.0, kind="xid", xid=79, gpu_index=0, message="again"), 90.0)
    conds = r.rule.conditions(r.ctx, 120.0)
    assert conds is not None and {c.labels["xid"] for c in conds} == {"79", "94", "13"}
    assert next(c for c in conds if c.labels["xid"] == "79").value == 2
    conds = r.rule.conditions(r.ctx, 170.0)  # 94 last at 50 -> expired; 79 last at 90 -> held
    assert conds is not None and {c.labels["xid"] for c in conds} == {"79"}
    assert r.rule.conditions(r.ctx, 190.0) == []


def test_ecc_uncorrected(runner, w):
    r = runner("ecc")
    assert r.feed(w.snap(w.gpu(0, ecc_uncorrected=0, ecc_corrected=12)), 0.0) == []
    conds = r.feed(w.snap(w.gpu(0, ecc_uncorrected=3)), 1.0)
    assert conds and conds[0].value == 3 and "3 uncorrectable ECC errors" in conds[0].summary


def test_host_down_states_and_silence_of_frames(runner):
    r = runner("host_down", missed_intervals=3)
    ctx = r.ctx
    assert r.rule.conditions(ctx, 0.0) is None, "no state yet: unknown"
    ctx.state = HostState(name="n3", status="connecting", since=0.0)
    assert r.rule.conditions(ctx, 1.0) == []
    ctx.state = HostState(name="n3", status="up", since=1.0)
    ctx.last_frame = 5.0
    assert r.rule.conditions(ctx, 7.0) == []
    conds = r.rule.conditions(ctx, 8.5)
    assert conds and "no frame for 3s" in conds[0].summary
    ctx.last_frame = 9.0
    assert r.rule.conditions(ctx, 9.5) == []
    ctx.state = HostState(name="n3", status="down", reason="connection refused", since=10.0)
    conds = r.rule.conditions(ctx, 10.0)
    assert conds and conds[0].summary == "n3 is down: connection refused"
    ctx.state = HostState(name="n3", status="connecting", since=11.0)
    assert r.rule.conditions(ctx, 11.0), "reconnect attempts do not clear it"
    ctx.state = HostState(name="n3", status="up", since=12.0)
    ctx.last_frame = 12.0
    assert r.rule.conditions(ctx, 12.5) == []


def test_host_key_reason_is_the_host_key_alert(runner):
    r = runner("host_down")
    r.ctx.state = HostState(name="n3", status="down", since=0.0,
                            reason="host key mismatch for n3 (known_hosts line 4)")
    conds = r.rule.conditions(r.ctx, 0.0)
    assert conds and conds[0].summary.startswith("n3: host key mismatch for n3")
    assert conds[0].annotations["kind"] == "host_key"


def test_storage_rule(runner):
    r = runner("storage", host="")
    assert r.rule.conditions(r.ctx, 0.0) is None
    r.rule.report(True, "database or disk is full")  # type: ignore[attr-defined]
    conds = r.rule.conditions(r.ctx, 0.0)
    assert conds and "storage is failing: database or disk is full" in conds[0].summary
    assert conds[0].annotations["error"] == "database or disk is full"  # the name receivers read
    r.rule.report(False, None)  # type: ignore[attr-defined]
    assert r.rule.conditions(r.ctx, 1.0) == []


def test_selector_matching():
    labels = {"host": "n3", "gpu": "2", "user": "alice", "rule": "wasted"}
    assert selector_matches(Selector(), labels, [])
    assert selector_matches(Selector(hosts=["n*"]), labels, [])
    assert not selector_matches(Selector(hosts=["gpu-*"]), labels, [])
    assert selector_matches(Selector(tags=["prod"]), labels, ["prod", "a100"])
    assert not selector_matches(Selector(tags=["prod"]), labels, ["dev"])
    assert selector_matches(Selector(gpus=[2, 3]), labels, [])
    assert not selector_matches(Selector(gpus=[0]), labels, [])
    assert not selector_matches(Selector(users=["bob"]), labels, [])
    assert not selector_matches(Selector(exclude_users=["al*"]), labels, [])
    assert selector_matches(Selector(gpus=[0], users=["bob"]), {"host": "n3"}, []), "host-level label set"
    assert not selector_matches(Selector(hosts=["n3"], tags=["prod"]), labels, ["dev"]), "fields are ANDed"


def test_silence_matchers():
    labels = {"host": "n3", "gpu": "2", "user": "alice", "rule": "wasted"}
    assert matchers_match({"host": "n3", "rule": "wasted"}, labels)
    assert matchers_match({"host": "n[0-9]", "user": "a*"}, labels)
    assert not matchers_match({"host": "n3", "rule": "idle"}, labels)
    assert not matchers_match({"pid": "1"}, labels)


def test_host_down_gives_a_new_connection_time_for_its_first_frame(runner):
    r = runner("host_down", missed_intervals=3)
    r.ctx.state = HostState(name="n3", status="up", since=100.0)
    r.ctx.last_frame = 50.0  # from the previous connection
    assert r.rule.conditions(r.ctx, 112.0) == [], "3 intervals + 10 s startup grace"
    conds = r.rule.conditions(r.ctx, 113.5)
    assert conds and "no frame for 13s" in conds[0].summary
