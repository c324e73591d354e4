"""The NVML boundary: the only package that imports pynvml.

- ``codes``: NVML return codes and what each means to the agent (missing, failed, device gone, driver gone),
  and the NVML enumerations the agent uses.
- ``lib``: pynvml with the calls that differ between nvidia-ml-py releases made the same (process-list
  struct layouts, TemperatureV, the library-mismatch exception).
- ``gateway``: every query the agent makes, one method per concern, with the error mapping.
- ``readings``: the plain values the gateway returns.
"""

from __future__ import annotations

import pynvml
from gpufleet.agent.nvml.codes import (
    CLOCK_GRAPHICS,
    CLOCK_MEM,
    CLOCK_SM,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    ERROR_CODES,
    EVENT_XID,
    GPM_ANY_TENSOR_UTIL,
    GPM_DRAM_BW_UTIL,
    GPM_GRAPHICS_UTIL,
    GPM_SM_UTIL,
    MEMORY_V2,
    MIG_ENABLE,
    TEMPERATURE_GPU,
    THRESHOLD_SHUTDOWN,
    THRESHOLD_SLOWDOWN,
    THROTTLE_BITS,
    THROTTLE_REASONS,
    VOLATILE_ECC,
    decode_throttle,
    error_name,
)
from gpufleet.agent.nvml.gateway import Gateway, handle_key, library_mismatch, make_error, new_gpm_sample
from gpufleet.agent.nvml.readings import (
    GpmReading,
    GpmState,
    MemoryReading,
    ProcessList,
    ProcessUtil,
    RawProcess,
    ReadLog,
    RemappedRows,
    SystemInfo,
    XidReading,
)

NVMLError = pynvml.NVMLError

__all__ = [
    "CLOCK_GRAPHICS", "CLOCK_MEM", "CLOCK_SM", "ECC_CORRECTED", "ECC_UNCORRECTED", "ERROR_CODES", "EVENT_XID",
    "GPM_ANY_TENSOR_UTIL", "GPM_DRAM_BW_UTIL", "GPM_GRAPHICS_UTIL", "GPM_SM_UTIL", "MEMORY_V2", "MIG_ENABLE",
    "NVMLError", "TEMPERATURE_GPU", "THRESHOLD_SHUTDOWN", "THRESHOLD_SLOWDOWN", "THROTTLE_BITS",
    "THROTTLE_REASONS", "VOLATILE_ECC", "Gateway", "GpmReading", "GpmState", "MemoryReading", "ProcessList",
    "ProcessUtil", "RawProcess", "ReadLog", "RemappedRows", "SystemInfo", "XidReading", "decode_throttle",
    "error_name", "handle_key", "library_mismatch", "make_error", "new_gpm_sample",
]
