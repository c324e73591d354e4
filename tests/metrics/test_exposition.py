"""What a scrape contains, from a stand-in source with hand-built wire snapshots."""

from __future__ import annotations

import math

import pytest
from gpufleet.collector.faces.metrics.exporter import (
    METRIC_NAMES,
    UNATTRIBUTED_USER,
    FleetCollector,
)
from gpufleet.collector.fleet import query
from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.model import sample
from gpufleet.collector.model.views import GPU_STATES
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests import builders
from tests.builders import gpu, lost_gpu, proc
from tests.metrics.metrics_testkit import (
    GIB,
    StandIn,
    exposition,
    reference_exposition,
    run_promtool,
    snapshot,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

GPU0 = {"host": "gpu01", "gpu": "0", "uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-80GB"}
GPU1 = {"host": "gpu01", "gpu": "1", "uuid": "GPU-bbbb", "name": "NVIDIA A100-SXM4-80GB"}


def samples(source: StandIn) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(exposition(source)):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def get(smp: Samples, metric: str, /, **labels: str) -> float | None:
    return smp.get((metric, frozenset(labels.items())))


def names_for(smp: Samples, name: str) -> list[dict[str, str]]:
    return [dict(lab) for (n, lab) in smp if n == name]


def test_gpu_readings_carry_host_gpu_uuid_name(source: StandIn) -> None:
    s = samples(source)
    assert get(s, "gpufleet_gpu_utilization_percent", **GPU0) == 87
    assert get(s, "gpufleet_gpu_utilization_percent", **GPU1) == 0  # a real 0 is kept
    assert get(s, "gpufleet_gpu_memory_utilization_percent", **GPU0) == 40
    assert get(s, "gpufleet_gpu_sm_active_percent", **GPU0) == 42  # GPM (Hopper+)
    assert get(s, "gpufleet_gpu_memory_used_bytes", **GPU0) == 30 * GIB
    assert get(s, "gpufleet_gpu_memory_total_bytes", **GPU0) == 80 * GIB
    assert get(s, "gpufleet_gpu_memory_reserved_bytes", **GPU0) == 512 << 20
    assert get(s, "gpufleet_gpu_temperature_celsius", **GPU0) == 71
    assert get(s, "gpufleet_gpu_temperature_slowdown_celsius", **GPU0) == 87
    assert get(s, "gpufleet_gpu_power_watts", **GPU0) == 312.5
    assert get(s, "gpufleet_gpu_power_limit_watts", **GPU0) == 400
    assert get(s, "gpufleet_gpu_sm_clock_hertz", **GPU0) == 1410e6  # MHz on the wire, base unit here
    assert get(s, "gpufleet_gpu_memory_clock_hertz", **GPU0) == 1593e6
    assert get(s, "gpufleet_gpu_throttled", **GPU0, reason="sw_power_cap") == 1
    assert get(s, "gpufleet_gpu_ecc_errors_total", **GPU0, type="corrected") == 3
    assert get(s, "gpufleet_gpu_ecc_errors_total", **GPU0, type="uncorrected") == 0
    assert get(s, "gpufleet_gpu_mig_mode", **GPU0) == 0
    assert get(s, "gpufleet_gpu_processes", **GPU0) == 3
    assert get(s, "gpufleet_gpu_processes_unattributed", **GPU0) == 1
    assert get(s, "gpufleet_gpu_info", **GPU0, pci_bus_id="00000000:07:00.0", serial="1320") == 1
    assert get(s, "gpufleet_host_gpus", host="gpu01") == 2


def test_missing_readings_give_no_sample_not_zero(source: StandIn) -> None:
    s = samples(source)
    for name in ("gpufleet_gpu_temperature_celsius", "gpufleet_gpu_power_watts",
                 "gpufleet_gpu_memory_utilization_percent", "gpufleet_gpu_ecc_errors_total",
                 "gpufleet_gpu_mig_mode", "gpufleet_gpu_sm_clock_hertz", "gpufleet_gpu_sm_active_percent"):
        assert not [lab for lab in names_for(s, name) if lab["gpu"] == "1"], name
    assert names_for(s, "gpufleet_gpu_fan_speed_percent") == []  # None on both GPUs
    # bob's process has no readable memory: counted, but no memory sample
    assert get(s, "gpufleet_user_gpu_processes", host="gpu01", gpu="1", user="bob") == 1
    assert get(s, "gpufleet_user_gpu_memory_bytes", host="gpu01", gpu="1", user="bob") is None


def test_only_hosts_that_are_up_expose_gpu_series(source: StandIn) -> None:
    s = samples(source)
    assert get(s, "gpufleet_host_up", host="gpu01") == 1
    assert get(s, "gpufleet_host_up", host="gpu02") == 0  # down, though its last snapshot is kept
    assert get(s, "gpufleet_host_up", host="gpu03") == 0  # still connecting
    assert get(s, "gpufleet_host_last_seen_timestamp_seconds", host="gpu02") == 1_699_999_400.0
    assert get(s, "gpufleet_host_last_seen_timestamp_seconds", host="gpu03") is None
    assert get(s, "gpufleet_host_status_since_timestamp_seconds", host="gpu02") == 1_699_999_500.0
    gpu_hosts = {dict(lab).get("host") for (n, lab) in s if n.startswith(("gpufleet_gpu_", "gpufleet_user_"))}
    assert gpu_hosts == {"gpu01", None}  # None: gpufleet_user_gpus has no host label
    assert get(s, "gpufleet_host_lag_seconds", host="gpu02") is None
    assert get(s, "gpufleet_host_frames_total", host="gpu02") == 30  # counters stay for down hosts


def test_host_info_and_tags(source: StandIn) -> None:
    s = samples(source)
    assert names_for(s, "gpufleet_host_info") == [{
        "host": "gpu01", "agent_version": "0.1.0", "driver_version": "550.54.15",
        "nvml_version": "12.550.54.15", "cuda_version": "12.4", "backend": "fake"}]
    assert sorted(lab["tag"] for lab in names_for(s, "gpufleet_host_tag")) == ["a100", "lab"]
    assert get(s, "gpufleet_host_connects_total", host="gpu01") == 2
    assert get(s, "gpufleet_host_reconnects_total", host="gpu01") == 1
    assert get(s, "gpufleet_host_bad_frames_total", host="gpu01") == 1
    assert get(s, "gpufleet_host_snapshot_timestamp_seconds", host="gpu01") == 1_700_000_000.0


def test_flags_wasted_and_lost(source: StandIn) -> None:
    source.live.hosts["gpu01"].snapshot = snap = snapshot()
    snap.gpus.append(lost_gpu(2, uuid="GPU-cccc"))
    source.flag_map[("gpu01", 0)] = {"gpu_lost"}
    s = samples(source)
    assert get(s, "gpufleet_gpu_wasted", **GPU1) == 1
    assert get(s, "gpufleet_gpu_wasted", **GPU0) == 0
    assert sorted(lab["flag"] for lab in names_for(s, "gpufleet_gpu_flag") if lab["gpu"] == "1") == [
        "stale", "wasted"]
    assert get(s, "gpufleet_gpu_lost", **GPU0) == 1  # from the rule
    assert get(s, "gpufleet_gpu_lost", host="gpu01", gpu="2", uuid="GPU-cccc", name="") == 1  # unreadable
    assert get(s, "gpufleet_gpu_lost", **GPU1) == 0
    assert get(s, "gpufleet_gpu_utilization_percent", host="gpu01", gpu="2", uuid="GPU-cccc", name="") is None


def test_users_are_aggregated_never_per_pid(source: StandIn) -> None:
    held = gpu(3, uuid="GPU-dddd", procs=[proc(9, mem=GIB)])
    second = HostState(name="gpu04", status="up", snapshot=builders.snap(held, ts=1.0, seq=1))
    source.live.hosts["gpu04"] = second
    text = exposition(source)
    label_names = {k for f in text_string_to_metric_families(text) for smp in f.samples for k in smp.labels}
    assert "pid" not in label_names
    s = samples(source)
    assert get(s, "gpufleet_user_gpu_memory_bytes", host="gpu01", gpu="0", user="alice") == 28 * GIB
    assert get(s, "gpufleet_user_gpu_processes", host="gpu01", gpu="0", user="alice") == 2
    assert get(s, "gpufleet_user_gpu_memory_bytes", host="gpu01", gpu="0", user=UNATTRIBUTED_USER) == 2 * GIB
    assert get(s, "gpufleet_user_gpus", user="alice") == 2  # gpu01/0 and gpu04/3
    assert get(s, "gpufleet_user_gpus", user="bob") == 1


def test_alert_counts_and_collector_health(source: StandIn) -> None:
    source.stat_values.update({"weird key": 1.0, "Caps": 2.0, "retries_total": 7.0, "nan_gauge": math.nan,
                               "ssh_sessions": 3.0})
    s = samples(source)
    assert get(s, "gpufleet_alerts", rule="wasted", severity="warning", state="firing") == 1
    assert get(s, "gpufleet_alerts", rule="overheating", severity="critical", state="pending") == 2
    by_status = {lab["status"]: get(s, "gpufleet_collector_hosts", **lab)
                 for lab in names_for(s, "gpufleet_collector_hosts")}
    assert by_status == {"up": 1, "down": 1, "connecting": 1, "maintenance": 0}
    assert get(s, "gpufleet_collector_lag_seconds") == 0.25  # the down host's 9 s lag is history
    assert get(s, "gpufleet_collector_frames_total") == 150
    assert get(s, "gpufleet_collector_store_queue_depth") == 4
    assert get(s, "gpufleet_collector_notify_queue_depth") == 0
    assert get(s, "gpufleet_collector_notifications_failed_total") == 1
    assert get(s, "gpufleet_collector_store_healthy") == 1
    assert get(s, "gpufleet_collector_uptime_seconds") == 42
    assert get(s, "gpufleet_collector_gc_seconds_total") == 0.05
    # stats keys without a spec: exposed by suffix; unsafe names and non-finite values dropped
    assert get(s, "gpufleet_collector_retries_total") == 7
    assert get(s, "gpufleet_collector_ssh_sessions") == 3
    names = {n for n, _ in s}
    assert not {n for n in names if "weird" in n or "Caps" in n or "nan_gauge" in n}
    # already shown another way: not repeated
    assert not names & {"gpufleet_collector_hosts_total", "gpufleet_collector_hosts_up",
                        "gpufleet_collector_lag_max_seconds"}
    text = exposition(source)
    assert "# TYPE gpufleet_collector_retries_total counter" in text
    assert "# TYPE gpufleet_collector_ssh_sessions gauge" in text


def test_collector_totals_fall_back_to_the_live_view(source: StandIn) -> None:
    source.stat_values = {}
    s = samples(source)
    assert get(s, "gpufleet_collector_frames_total") == 150  # 120 + 30 + 0
    assert get(s, "gpufleet_collector_bad_frames_total") == 1
    assert get(s, "gpufleet_collector_reconnects_total") == 1
    assert get(s, "gpufleet_collector_store_queue_depth") is None


def broken() -> StandIn:
    """A source whose rule engine raises."""
    source = StandIn()
    source.fail_flags = True
    return source


def test_a_failing_section_is_dropped_whole_and_counted() -> None:
    source = broken()
    s = samples(source)
    assert get(s, "gpufleet_host_up", host="gpu01") == 1  # other sections unaffected
    assert get(s, "gpufleet_alerts", rule="wasted", severity="warning", state="firing") == 1
    assert names_for(s, "gpufleet_gpu_utilization_percent") == []  # no half-built GPU section
    assert names_for(s, "gpufleet_user_gpus") == []
    assert get(s, "gpufleet_collector_metrics_errors_total", section="gpus") == 1


def test_empty_fleet_is_valid() -> None:
    source = StandIn()
    source.live = LiveView()
    source.counts, source.stat_values = {}, {}
    s = samples(source)
    assert get(s, "gpufleet_collector_hosts", status="up") == 0
    assert get(s, "gpufleet_collector_lag_seconds") is None


def full_source() -> StandIn:
    """Every field set somewhere, so every spec'd family has a sample."""
    source = StandIn()
    snap = snapshot()
    snap.gpus[0].fan_speed = 40
    snap.gpus.append(gpu(2, uuid="GPU-cccc", mig_mode=True, mig_instances=[
        sample.MigInstance(gi_id=1, ci_id=0, profile="1g.10gb", memory_total=10 * GIB, memory_used=GIB)]))
    pod = snap.gpus[0].processes[1]  # runs in a pod the kubelet named
    pod.pod_namespace, pod.pod_name, pod.container_name = "ml", "train-0", "trainer"
    snap.allocations = [sample.SlurmAllocation(job="812", gpu_indexes=[0, 2], name="llama-pretrain",
                                               user="alice", account="nlp", partition="gpu", state="RUNNING")]
    source.live.hosts["gpu01"].snapshot = snap
    source.live.hosts["gpu09"] = HostState(name="gpu09", status="up", clock_skew=600.0)  # a skewed clock
    return source


def test_describe_lists_exactly_what_collect_can_emit() -> None:
    collector = FleetCollector(full_source())
    described = {s.name if s.type != "counter" else s.name + "_total" for s in collector.describe()}
    assert described == METRIC_NAMES
    emitted = {smp.name for fam in collector.collect() for smp in fam.samples}
    assert emitted == METRIC_NAMES - {"gpufleet_collector_metrics_errors_total"}
    registry = CollectorRegistry()
    registry.register(collector)  # names are unique and the registry accepts them


def test_promtool_check_metrics_passes(source: StandIn, promtool: str) -> None:
    for src in (source, full_source(), broken()):
        res = run_promtool(promtool, "check", "metrics", stdin=exposition(src))
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res


@pytest.mark.parametrize("openmetrics", [False, True])
@pytest.mark.parametrize("dcgm_names", [False, True])
def test_served_text_is_prometheus_clients_byte_for_byte(source: StandIn, openmetrics: bool,
                                                         dcgm_names: bool) -> None:
    """The server writes the text itself (collector/faces/metrics/exposition.py, for speed);
    prometheus_client's encoders are the reference, over every kind of source and label values that need
    escaping."""
    odd = snapshot()
    odd.gpus[0].name = 'A"B\\C\nD {x="1"}'
    odd.gpus[0].processes[0].user = "jürgen \\ \"q\""
    source.live.hosts["gpu01"].snapshot = odd
    for src in (source, full_source(), broken()):
        mine = exposition(src, openmetrics=openmetrics, dcgm_names=dcgm_names)
        assert mine == reference_exposition(src, openmetrics=openmetrics, dcgm_names=dcgm_names)
        assert mine.count("\n") >= (1 if src is source else 0)


@pytest.mark.parametrize("name, user", [('A"B\\C\nD', "jürgen"), ("{weird}", "a b")])
def test_odd_label_values_are_escaped(source: StandIn, promtool: str, name: str, user: str) -> None:
    snap = snapshot()
    snap.gpus[0].name = name
    snap.gpus[0].processes[0].user = user
    source.live.hosts["gpu01"].snapshot = snap
    s = samples(source)
    assert get(s, "gpufleet_gpu_utilization_percent", host="gpu01", gpu="0", uuid="GPU-aaaa", name=name) == 87
    assert get(s, "gpufleet_user_gpu_processes", host="gpu01", gpu="0", user=user) == 1
    res = run_promtool(promtool, "check", "metrics", stdin=exposition(source))
    assert res.returncode == 0, res


def test_dcgm_profiling_series_come_from_gpm_where_the_gpu_has_it(source: StandIn) -> None:
    """Issue 37: NVIDIA's dashboard's "Tensor Core Utilization" (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) and the
    DRAM and engine activity come from GPM, as ratios, on the GPU that has it; none on the one without."""
    snap = snapshot()
    snap.gpus[0].tensor_active, snap.gpus[0].dram_active, snap.gpus[0].gr_active = 31, 55, 42
    source.live.hosts["gpu01"].snapshot = snap
    fams = list(text_string_to_metric_families(exposition(source, dcgm_names=True)))
    prof = sorted((s.name, s.labels.get("Hostname"), s.labels.get("gpu"), s.value)
                  for f in fams for s in f.samples if s.name.startswith("DCGM_FI_PROF_"))
    assert prof == [("DCGM_FI_PROF_DRAM_ACTIVE", "gpu01", "0", 0.55),
                    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu01", "0", 0.42),
                    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gpu01", "0", 0.31),
                    ("DCGM_FI_PROF_SM_ACTIVE", "gpu01", "0", 0.42)]  # GPU 1 has no GPM reading


def test_dcgm_series_are_each_hosts_own_instance_with_its_pods(source: StandIn) -> None:
    """Issue 37: each host's DCGM series carry ``instance`` (the host, as its own exporter's target would)
    and ``pod``/``namespace``/``container`` where a pod uses the GPU (absent elsewhere, as dcgm-exporter);
    the collector's own series carry no ``instance`` (Prometheus gives them the collector's)."""
    fams = list(text_string_to_metric_families(exposition(full_source(), dcgm_names=True)))
    temp = {s.labels["gpu"]: s.labels for f in fams for s in f.samples if s.name == "DCGM_FI_DEV_GPU_TEMP"}
    assert {g: (lab["instance"], lab["Hostname"]) for g, lab in temp.items()} == {"0": ("gpu01", "gpu01")}
    fb = [s.labels for f in fams for s in f.samples if s.name == "DCGM_FI_DEV_FB_USED"]
    by_gpu = {(lab["gpu"], lab.get("GPU_I_ID")): lab for lab in fb}
    assert {k: by_gpu[("0", None)].get(k) for k in ("pod", "namespace", "container")} == {
        "pod": "train-0", "namespace": "ml", "container": "trainer"}
    assert not {"pod", "namespace", "container"} & set(by_gpu[("1", None)])
    assert not {"pod", "namespace", "container"} & set(by_gpu[("2", "1")])  # the MIG instance: no pod
    assert by_gpu[("2", "1")]["instance"] == "gpu01"
    own = [s.labels for f in fams for s in f.samples if not s.name.startswith("DCGM_")]
    assert own and not any("instance" in lab for lab in own)


def test_gpus_by_state_count_each_gpu_once_as_status_does(source: StandIn) -> None:
    """``gpufleet_gpus{state}`` is the status line's partition (issue 36): gpu01's busy GPU, its wasted one
    (a waste rule fires on it, so it is not also busy), the down host's two GPUs as unknown; the sum is
    every GPU the collector has readings of."""
    s = samples(source)
    got = {state: get(s, "gpufleet_gpus", state=state) for state in GPU_STATES}
    assert got == {"busy": 1, "wasted": 1, "idle": 0, "unused": 0, "lost": 0, "hung": 0, "unreadable": 0,
                   "unknown": 2, "maintenance": 0}
    view = query.build_fleet_view(source.live.hosts.values(), source.firing(), now=1_700_000_001.0)
    assert {state: getattr(view.totals, state) for state in GPU_STATES} == got
