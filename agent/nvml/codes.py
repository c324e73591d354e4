"""NVML return codes and what each one means to the agent: the one owner of that classification.

The numbers are nvml.h's (an ABI: they never change). They are written out here rather than read from
``pynvml``, because the oldest nvidia-ml-py the project supports (12.535.77) lacks some of them
(``NVML_ERROR_GPU_NOT_FOUND``, 28), and a name looked up on a module that lacks it is an AttributeError at
the first failure (issue 32, item 3: the agent exited on ``pynvml.NVMLLibraryMismatchError``).

Four classes, from what real drivers do (NVML API reference, "Error reporting"; nvitop ``api/libnvml.py``;
gpustat issue #161 and nvitop issue #75 for fields that fail alone):

- **field missing** (the reading is None, silently): NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND,
  DEPRECATED, NOT_FOUND, NO_DATA, ARGUMENT_VERSION_MISMATCH.
- **field failed** (None, counted per field and logged once): everything else that is not below, UNKNOWN
  above all. Consumer boards answer UNKNOWN for the fan speed, power reads show ``ERR!`` now and then: one
  failing field never makes a GPU lost. A GPU whose *every* reading fails for several samples is lost
  (the sampler decides that, :data:`ALL_FAILED_SAMPLES`).
- **device gone** (the GPU is lost): GPU_IS_LOST, GPU_NOT_FOUND, RESET_REQUIRED. NVML itself says so.
- **driver gone** (re-initialise NVML): UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH,
  LIBRARY_NOT_FOUND.
"""

from __future__ import annotations

from typing import Final

#: nvml.h ``nvmlReturn_t`` (NVML_ERROR_ prefix dropped). Scenario files and the fake library use these names.
ERROR_CODES: Final[dict[str, int]] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "UNKNOWN": 999,
}
_NAMES: Final = {code: f"NVML_ERROR_{name}" for name, code in ERROR_CODES.items()}

SUCCESS: Final = 0
UNINITIALIZED: Final = ERROR_CODES["UNINITIALIZED"]
INVALID_ARGUMENT: Final = ERROR_CODES["INVALID_ARGUMENT"]
NOT_SUPPORTED: Final = ERROR_CODES["NOT_SUPPORTED"]
NO_PERMISSION: Final = ERROR_CODES["NO_PERMISSION"]
NOT_FOUND: Final = ERROR_CODES["NOT_FOUND"]
INSUFFICIENT_SIZE: Final = ERROR_CODES["INSUFFICIENT_SIZE"]
DRIVER_NOT_LOADED: Final = ERROR_CODES["DRIVER_NOT_LOADED"]
TIMEOUT: Final = ERROR_CODES["TIMEOUT"]
LIBRARY_NOT_FOUND: Final = ERROR_CODES["LIBRARY_NOT_FOUND"]
FUNCTION_NOT_FOUND: Final = ERROR_CODES["FUNCTION_NOT_FOUND"]
GPU_IS_LOST: Final = ERROR_CODES["GPU_IS_LOST"]
LIB_RM_VERSION_MISMATCH: Final = ERROR_CODES["LIB_RM_VERSION_MISMATCH"]
ARGUMENT_VERSION_MISMATCH: Final = ERROR_CODES["ARGUMENT_VERSION_MISMATCH"]
UNKNOWN: Final = ERROR_CODES["UNKNOWN"]

FIELD_MISSING: Final = frozenset(
    ERROR_CODES[n]
    for n in ("NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "DEPRECATED", "NOT_FOUND", "NO_DATA",
              "ARGUMENT_VERSION_MISMATCH")
)
DEVICE_GONE: Final = frozenset(ERROR_CODES[n] for n in ("GPU_IS_LOST", "GPU_NOT_FOUND", "RESET_REQUIRED"))
DRIVER_GONE: Final = frozenset(
    ERROR_CODES[n]
    for n in ("UNINITIALIZED", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "LIBRARY_NOT_FOUND")
)

#: Consecutive samples in which every reading of a GPU failed (field-failed codes) before the GPU counts as
#: lost: one bad sample is a glitch, three in a row is a GPU that no longer answers.
ALL_FAILED_SAMPLES: Final = 3


def error_name(code: int) -> str:
    """``NVML_ERROR_UNKNOWN`` for 999; a code nvml.h does not have is named by its number."""
    return _NAMES.get(code, f"NVML error {code}")


# ------------------------------------------------------------------------------------ NVML enumerations

TEMPERATURE_GPU: Final = 0  # nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
THRESHOLD_SHUTDOWN: Final = 0  # nvmlTemperatureThresholds_t
THRESHOLD_SLOWDOWN: Final = 1
CLOCK_GRAPHICS: Final = 0  # nvmlClockType_t
CLOCK_SM: Final = 1
CLOCK_MEM: Final = 2
ECC_CORRECTED: Final = 0  # nvmlMemoryErrorType_t
ECC_UNCORRECTED: Final = 1
VOLATILE_ECC: Final = 0  # nvmlEccCounterType_t
MIG_ENABLE: Final = 1
EVENT_XID: Final = 0x8  # nvmlEventTypeXidCriticalError
VALUE_NOT_AVAILABLE: Final = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_ulonglong (memory under WDDM)
NO_INSTANCE: Final = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId outside MIG

#: Versioned structs: sizeof | version << 24 (nvml.h NVML_STRUCT_VERSION).
MEMORY_V2: Final = 40 | 2 << 24  # nvmlMemory_v2
TEMPERATURE_V1: Final = 12 | 1 << 24  # nvmlTemperature_v1

# GPM metric ids (nvml.h nvmlGpmMetricId_t), Hopper and later.
GPM_GRAPHICS_UTIL: Final = 1  # percent of time any compute/graphics engine was active
GPM_SM_UTIL: Final = 2  # percent of SMs busy
GPM_ANY_TENSOR_UTIL: Final = 5  # percent of time the SMs did any tensor work
GPM_DRAM_BW_UTIL: Final = 10  # percent of DRAM bandwidth used

# Field value ids (nvml.h NVML_FI_*), read with nvmlDeviceGetFieldValues.
FI_MEMORY_TEMP: Final = 82  # HBM temperature, Celsius
FI_GPU_RECOVERY_ACTION: Final = 230  # nvmlDeviceGpuRecoveryAction_t; r550+ drivers

#: nvmlDeviceGpuRecoveryAction_t -> wire name. NVIDIA, "GPU Memory Error Management: Error Recovery and
#: Response Flags": reset = terminate GPU processes and ``nvidia-smi -r``; node_reboot = reboot the OS;
#: drain_p2p = stop new peer-to-peer work; drain_and_reset = drain, then reset.
RECOVERY_ACTIONS: Final[dict[int, str]] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}

#: Clock event ("throttle") reason bits -> the names the wire protocol uses.
THROTTLE_REASONS: Final[dict[int, str]] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal",
    0x0040: "hw_thermal",
    0x0080: "hw_power_brake",
    0x0100: "display_clocks",
    0x0200: "board_limit",
    0x0400: "reliability",
}
THROTTLE_BITS: Final[dict[str, int]] = {name: bit for bit, name in THROTTLE_REASONS.items()}


def decode_throttle(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names
