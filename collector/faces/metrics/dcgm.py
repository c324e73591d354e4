"""DCGM-named series (``metrics: {dcgm_names: true}``): dashboards and alert rules written for NVIDIA's
dcgm-exporter keep working against gpufleet.

Each series is dcgm-exporter's name, unit and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``, ``pci_bus_id``; MIG instances add ``GPU_I_ID``, ``GPU_I_PROFILE``), computed from what NVML
measured, the same readings as the ``gpufleet_*`` series. The DEV (device) fields, and of the PROF
(profiling) fields only ``DCGM_FI_PROF_SM_ACTIVE``, from NVML's GPM SM utilisation (Hopper and later: the
same measure, the fraction of time the SMs were busy, as a ratio 0-1). The other PROF fields
(``..._GR_ENGINE_ACTIVE``, ``..._PIPE_TENSOR_ACTIVE``, ...) are counters NVML's utilisation readings are
not, so they are left out rather than approximated (deploy/OPERATOR.md says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from gpufleet.collector.faces.metrics.exposition import Scrape, Spec
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample

MIB: Final = 1 << 20
LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id")
MIG_LABELS: Final = (*LABELS, "GPU_I_ID", "GPU_I_PROFILE")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    doc: str  # dcgm-exporter's help text, with its unit


FIELDS: Final = (
    _Field("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    _Field("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    _Field("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    _Field("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    _Field("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    _Field("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    _Field("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    _Field("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    _Field("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    _Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors."),
    _Field("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %)."),
)
NAMES: Final = frozenset(f.name for f in FIELDS)
SPECS: Final = tuple(Spec(f.name, "gauge", f.doc, LABELS) for f in FIELDS)


def _mib(used: int | None) -> float | None:
    return None if used is None else used / MIB


def _free_mib(total: int | None, used: int | None, reserved: int | None) -> float | None:
    if total is None or used is None:
        return None
    return max(0, total - used - (reserved or 0)) / MIB


def add_samples(scrape: Scrape, hosts: Iterable[HostState]) -> None:
    """The DCGM series of the GPUs of the hosts that are up (a down host's last readings are not now)."""
    for h in hosts:
        if h.status != "up" or h.snapshot is None:
            continue
        for g in h.snapshot.gpus:
            if g.error is not None:
                continue  # a lost GPU has no readings; DCGM exports nothing for it either
            lab = _labels(h.name, g)
            ls, put = scrape.label_string(LABELS, lab), scrape.put
            put("DCGM_FI_DEV_GPU_TEMP", LABELS, lab, ls, g.temperature)
            put("DCGM_FI_DEV_POWER_USAGE", LABELS, lab, ls, g.power_draw)
            put("DCGM_FI_DEV_SM_CLOCK", LABELS, lab, ls, g.clock_sm)
            put("DCGM_FI_DEV_MEM_CLOCK", LABELS, lab, ls, g.clock_mem)
            put("DCGM_FI_DEV_GPU_UTIL", LABELS, lab, ls, g.util_gpu)
            put("DCGM_FI_DEV_MEM_COPY_UTIL", LABELS, lab, ls, g.util_mem)
            put("DCGM_FI_DEV_FB_USED", LABELS, lab, ls, _mib(g.memory_used))
            put("DCGM_FI_DEV_FB_FREE", LABELS, lab, ls,
                _free_mib(g.memory_total, g.memory_used, g.memory_reserved))
            put("DCGM_FI_DEV_XID_ERRORS", LABELS, lab, ls, h.last_xid.get(g.index, 0))
            put("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", LABELS, lab, ls, g.ecc_uncorrected)
            put("DCGM_FI_PROF_SM_ACTIVE", LABELS, lab, ls, None if g.sm_active is None else g.sm_active / 100)
            for m in g.mig_instances:
                # a MIG instance's series shares the device series' name, with two more labels (as DCGM does)
                mlab = (*lab, str(m.gi_id), m.profile or "")
                mls = scrape.label_string(MIG_LABELS, mlab)
                put("DCGM_FI_DEV_FB_USED", MIG_LABELS, mlab, mls, _mib(m.memory_used))
                put("DCGM_FI_DEV_FB_FREE", MIG_LABELS, mlab, mls,
                    _free_mib(m.memory_total, m.memory_used, None))


def _labels(host: str, g: sample.GpuSample) -> tuple[str, ...]:
    return (str(g.index), g.uuid, f"nvidia{g.index}", g.name or "", host, g.pci_bus_id or "")
