"""DCGM-named series (``metrics: {dcgm_names: true}``): dashboards and alert rules written for NVIDIA's
dcgm-exporter keep working against gpufleet, NVIDIA's own Grafana dashboard unchanged among them.

Each series is dcgm-exporter's name, unit and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``, ``pci_bus_id``; MIG instances add ``GPU_I_ID``, ``GPU_I_PROFILE``), computed from what NVML
measured, the same readings as the ``gpufleet_*`` series. Two more labels make one collector look like one
exporter per host, as dashboards expect:

- ``instance``: the host's name. A per-host dcgm-exporter is scraped as its own target, so Prometheus stamps
  each host's series with their own ``instance``, and NVIDIA's dashboard picks hosts with
  ``label_values(DCGM_FI_DEV_GPU_TEMP, instance)``. With ``honor_labels: true`` on the scrape job
  (deploy/prometheus.yml) Prometheus keeps ours; the collector's own series carry none, so they keep the
  collector's address.
- ``pod``, ``namespace``, ``container``: the Kubernetes pod using the GPU (or the MIG instance), as
  dcgm-exporter's pod mapping names them, from the kubelet's names the agent resolved on the node; absent
  where no pod uses it. A GPU shared by several pods carries the one holding the most memory
  (dcgm-exporter, too, maps a device to one pod unless GPU sharing is configured).

Fields: the DEV (device) ones, and the PROF (profiling) ones NVML's GPM measures on Hopper and later
(the same measures as DCGM's, a ratio 0-1): ``DCGM_FI_PROF_SM_ACTIVE``, ``..._GR_ENGINE_ACTIVE``,
``..._PIPE_TENSOR_ACTIVE`` and ``..._DRAM_ACTIVE``; a GPU without GPM has none of them (as dcgm-exporter on
a GPU whose profiling module is unavailable). Other PROF fields (FP64/FP32 pipes, occupancy, NVLink and PCIe
rates) are not measured by NVML and are left out rather than approximated (deploy/OPERATOR.md says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from gpufleet.collector.faces.metrics.exposition import Scrape, Spec
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample

MIB: Final = 1 << 20
LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "instance")
#: a GPU (or MIG instance) a Kubernetes pod uses has these too (none otherwise, as dcgm-exporter)
POD_LABELS: Final = ("pod", "namespace", "container")
MIG: Final = ("GPU_I_ID", "GPU_I_PROFILE")


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
    _Field("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."),
    _Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    _Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
    _Field("DCGM_FI_PROF_DRAM_ACTIVE",
           "Ratio of cycles the device memory interface is active sending or receiving data."),
)
#: the PROF fields, from GPM: present only on GPUs that have it
PROF: Final = frozenset(f.name for f in FIELDS if f.name.startswith("DCGM_FI_PROF_"))
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
            device = _labels(h.name, g)
            names, lab = _with_pod(LABELS, device, g.processes)
            ls, put = scrape.label_string(names, lab), scrape.put
            put("DCGM_FI_DEV_GPU_TEMP", names, lab, ls, g.temperature)
            put("DCGM_FI_DEV_POWER_USAGE", names, lab, ls, g.power_draw)
            put("DCGM_FI_DEV_SM_CLOCK", names, lab, ls, g.clock_sm)
            put("DCGM_FI_DEV_MEM_CLOCK", names, lab, ls, g.clock_mem)
            put("DCGM_FI_DEV_GPU_UTIL", names, lab, ls, g.util_gpu)
            put("DCGM_FI_DEV_MEM_COPY_UTIL", names, lab, ls, g.util_mem)
            put("DCGM_FI_DEV_FB_USED", names, lab, ls, _mib(g.memory_used))
            put("DCGM_FI_DEV_FB_FREE", names, lab, ls,
                _free_mib(g.memory_total, g.memory_used, g.memory_reserved))
            put("DCGM_FI_DEV_XID_ERRORS", names, lab, ls, h.last_xid.get(g.index, 0))
            put("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", names, lab, ls, g.ecc_uncorrected)
            put("DCGM_FI_PROF_SM_ACTIVE", names, lab, ls, _ratio(g.sm_active))
            put("DCGM_FI_PROF_GR_ENGINE_ACTIVE", names, lab, ls, _ratio(g.gr_active))
            put("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", names, lab, ls, _ratio(g.tensor_active))
            put("DCGM_FI_PROF_DRAM_ACTIVE", names, lab, ls, _ratio(g.dram_active))
            for m in g.mig_instances:
                # a MIG instance's series shares the device series' name, with two more labels (as DCGM does)
                mnames, mlab = _with_pod((*LABELS, *MIG), (*device, str(m.gi_id), m.profile or ""),
                                         [p for p in g.processes if p.gi_id == m.gi_id])
                mls = scrape.label_string(mnames, mlab)
                put("DCGM_FI_DEV_FB_USED", mnames, mlab, mls, _mib(m.memory_used))
                put("DCGM_FI_DEV_FB_FREE", mnames, mlab, mls, _free_mib(m.memory_total, m.memory_used, None))


def _ratio(percent: int | None) -> float | None:
    return None if percent is None else percent / 100


def _labels(host: str, g: sample.GpuSample) -> tuple[str, ...]:
    return (str(g.index), g.uuid, f"nvidia{g.index}", g.name or "", host, g.pci_bus_id or "", host)


def _with_pod(names: tuple[str, ...], values: tuple[str, ...],
              procs: Iterable[sample.ProcessSample]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The labels with ``pod``, ``namespace`` and ``container`` of the pod whose processes hold the most
    memory here (module docstring); unchanged where no pod uses it."""
    held: dict[tuple[str, str, str], int] = {}
    for p in procs:
        if p.pod_name:
            key = (p.pod_name, p.pod_namespace or "", p.container_name or "")
            held[key] = held.get(key, 0) + (p.gpu_memory or 0)
    if not held:
        return names, values
    return (*names, *POD_LABELS), (*values, *min(held, key=lambda k: (-held[k], k)))
