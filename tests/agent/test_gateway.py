"""The NVML gateway's error mapping and fallbacks, through the fake library (real NVMLError codes)."""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest
from gpufleet.agent import nvml
from gpufleet.agent.errors import DriverError, GpuLostError, NvmlUnavailable
from gpufleet.agent.fake import FakeHandle

from .conftest import Env

ONE_GPU = """
gpus:
  - name: NVIDIA A100-SXM4-80GB
    memory_total_mib: 81920
    reserved_mib: 512
    power_limit_w: 400
    temp_slowdown: 87
    unsupported: {unsupported}
    errors: {errors}
    processes:
      - {{pid: 4242, user: alice, command: python train.py, memory_mib: 1024, sm_util: {sm}}}
"""


def one_gpu(unsupported: str = "[]", errors: str = "{}", sm: str = "50") -> str:
    return ONE_GPU.format(unsupported=unsupported, errors=errors, sm=sm)


def test_fake_raises_real_nvml_errors(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(unsupported="[fan]"))
    with pytest.raises(pynvml.NVMLError_NotSupported) as info:
        env.lib.nvmlDeviceGetFanSpeed(env.sampler.gpus[0].handle)
    assert info.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED


@pytest.mark.parametrize(
    ("field", "attrs"),
    [
        ("fan", ["fan_speed"]),
        ("ecc", ["ecc_corrected", "ecc_uncorrected"]),
        ("temperature", ["temperature"]),
        ("thresholds", ["temp_slowdown", "temp_shutdown"]),
        ("power", ["power_draw"]),
        ("power_limit", ["power_limit"]),
        ("clocks", ["clock_sm", "clock_mem"]),
        ("throttle", ["throttle_reasons"]),
        ("utilization", ["util_gpu", "util_mem"]),
        ("memory", ["memory_total", "memory_used", "memory_reserved"]),
        ("serial", ["serial"]),
        ("pci", ["pci_bus_id"]),
        ("mig", ["mig_mode"]),
    ],
)
@pytest.mark.parametrize("code", ["NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "DEPRECATED"])
def test_missing_field_becomes_null_rest_intact(
    make_env: Callable[..., Env], field: str, attrs: list[str], code: str
) -> None:
    env = make_env(one_gpu(errors=f"{{{field}: {code}}}"))
    snap, events = env.sampler.sample()
    gpu = snap.gpus[0]
    assert events == []
    assert gpu.error is None
    for attr in attrs:
        assert getattr(gpu, attr) is None, attr
    everything = {
        "fan_speed",
        "ecc_corrected",
        "ecc_uncorrected",
        "temperature",
        "temp_slowdown",
        "temp_shutdown",
        "power_draw",
        "power_limit",
        "clock_sm",
        "clock_mem",
        "throttle_reasons",
        "util_gpu",
        "util_mem",
        "memory_total",
        "memory_used",
        "memory_reserved",
        "serial",
        "pci_bus_id",
        "mig_mode",
    }
    for attr in everything - set(attrs):
        assert getattr(gpu, attr) is not None, attr
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert [p.pid for p in gpu.processes] == [4242]


def test_processes_unsupported_gives_empty_list(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(unsupported="[processes, graphics_processes]"))
    snap, _ = env.sampler.sample()
    assert snap.gpus[0].processes == []
    assert snap.gpus[0].util_gpu == 50


def test_memory_v2_used_excludes_reserved(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu())
    mem = env.gateway.memory(env.sampler.gpus[0].handle)
    assert mem is not None
    assert mem.total == 81920 << 20
    assert mem.used == 1024 << 20
    assert mem.reserved == 512 << 20


def test_memory_falls_back_to_v1_on_old_driver(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(unsupported="[memory_v2]"))
    mem = env.gateway.memory(env.sampler.gpus[0].handle)
    assert mem is not None
    assert mem.total == 81920 << 20
    assert mem.used == (1024 + 512) << 20  # v1 counts the reserved memory as used
    assert mem.reserved is None
    assert env.gateway._mem_v2 is False  # remembered: no v2 attempt per call afterwards


def test_throttle_reasons_fall_back_to_deprecated_call(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(unsupported="[clocks_event_reasons]"))
    assert env.gateway.throttle_reasons(env.sampler.gpus[0].handle) == []
    assert env.gateway._reasons_fn == "nvmlDeviceGetCurrentClocksThrottleReasons"


def test_throttle_decoding() -> None:
    assert nvml.decode_throttle(0) == []
    assert nvml.decode_throttle(0x1 | 0x4 | 0x20 | 0x40) == [
        "gpu_idle",
        "sw_power_cap",
        "sw_thermal",
        "hw_thermal",
    ]
    assert nvml.decode_throttle(0x8 | 0x10 | 0x80 | 0x100) == [
        "hw_slowdown",
        "sync_boost",
        "hw_power_brake",
        "display_clocks",
    ]
    assert nvml.decode_throttle(1 << 40) == ["unknown_0x10000000000"]


def test_process_utilization_not_found_is_an_empty_answer(make_env: Callable[..., Env]) -> None:
    """NOT_FOUND means "no process ran kernels since that timestamp" (NVML API reference,
    nvmlDeviceGetProcessUtilization): an answer with no samples, not a missing field."""
    env = make_env(one_gpu(unsupported="[]"))
    h = env.sampler.gpus[0].handle
    first = env.gateway.process_util(h, 0)
    assert first is not None and first.by_pid == {4242: (50, 25)}
    again = env.gateway.process_util(h, first.last_ts)  # same timestamp: NOT_FOUND
    assert again is not None and again.by_pid == {} and again.last_ts == first.last_ts


def test_process_utilization_clamped(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(sm="130"))
    pu = env.gateway.process_util(env.sampler.gpus[0].handle, 0)
    assert pu is not None and pu.by_pid[4242][0] == 100


def test_process_utilization_passes_last_seen_timestamp(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu())
    s1, _ = env.sampler.sample()
    ts1 = env.sampler.gpus[0].proc_ts
    assert ts1 > 0 and s1.gpus[0].processes[0].sm_util == 50
    env.clock.advance(0.5)
    env.sampler.sample()
    assert env.sampler.gpus[0].proc_ts > ts1


def test_gpu_is_lost_raises_gpu_lost(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu(errors="{fan: GPU_IS_LOST}"))
    with pytest.raises(GpuLostError):
        env.gateway.fan_speed(env.sampler.gpus[0].handle)


@pytest.mark.parametrize("code", ["UNINITIALIZED", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH"])
def test_driver_errors_raise_driver_error(make_env: Callable[..., Env], code: str) -> None:
    env = make_env(one_gpu(errors=f"{{temperature: {code}}}"))
    with pytest.raises(DriverError) as info:
        env.gateway.temperature(env.sampler.gpus[0].handle)
    assert info.value.code == nvml.ERROR_CODES[code]


def test_other_errors_become_null_with_one_warning(
    make_env: Callable[..., Env], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(one_gpu(errors="{fan: CORRUPTED_INFOROM}"))
    h = env.sampler.gpus[0].handle
    assert env.gateway.fan_speed(h) is None
    assert env.gateway.fan_speed(h) is None
    assert sum("NVML_ERROR_CORRUPTED_INFOROM" in r.getMessage() for r in caplog.records) == 1


def test_mig_instances(make_env: Callable[..., Env]) -> None:
    env = make_env(
        """
gpus:
  - mig:
      instances:
        - {gi_id: 1, ci_id: 0, profile: 3g.40gb, memory_mib: 40192, used_mib: 2048}
        - {gi_id: 5, ci_id: 2, memory_mib: 9856}
"""
    )
    snap, _ = env.sampler.sample()
    gpu = snap.gpus[0]
    assert gpu.mig_mode is True
    assert [(m.gi_id, m.ci_id, m.memory_total, m.memory_used) for m in gpu.mig_instances] == [
        (1, 0, 40192 << 20, 2048 << 20),
        (5, 2, 9856 << 20, 0),
    ]
    assert all(m.uuid and m.uuid.startswith("MIG-") for m in gpu.mig_instances)


def test_mig_disabled(make_env: Callable[..., Env]) -> None:
    env = make_env(one_gpu())
    snap, _ = env.sampler.sample()
    assert snap.gpus[0].mig_mode is False and snap.gpus[0].mig_instances == []


def test_handle_key_matches_same_device() -> None:
    h = FakeHandle(0)
    assert nvml.handle_key(h) == nvml.handle_key(h)
    assert nvml.handle_key(FakeHandle(1)) != nvml.handle_key(h)


def test_init_error_messages() -> None:
    class NoLib:
        def __init__(self, code: int) -> None:
            self.code = code

        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(self.code)

    with pytest.raises(
        NvmlUnavailable, match=r"libnvidia-ml\.so\.1 not found \(is the NVIDIA driver installed\?\)"
    ):
        nvml.Gateway(NoLib(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)).init()
    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        nvml.Gateway(NoLib(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).init()
    with pytest.raises(NvmlUnavailable, match="version mismatch"):
        nvml.Gateway(NoLib(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).init()
