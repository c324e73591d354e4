"""Bundled fake-backend scenarios (``gpufleet-agent --fake NAME``), used by tests and the demo.

Read through importlib.resources so they also work from inside the agent zipapp.

Scenario format (YAML; times are seconds since the agent started; every key but ``gpus`` is optional)::

    hostname: gpu-node-01            # also seeds the GPU UUIDs (override with --hostname)
    driver_version: "550.54.15"
    nvml_version: "12.550.54.15"
    cuda_version: 12040
    event_sets: true                 # false: nvmlEventSetCreate answers NOT_SUPPORTED
    privileged: false                # true: the agent runs as root (a MIG GPU's parent lists processes)
    gpus:
      - name: NVIDIA A100-SXM4-80GB
        memory_total_mib: 81920
        reserved_mib: 512            # v2 "reserved"; the v1 call counts it as used
        power_limit_w: 400
        idle_power_w: 60
        temp_slowdown: 87
        temp_shutdown: 92
        uuid: GPU-...                # default: deterministic from hostname + index
        unsupported: [fan, ecc]      # these calls raise NOT_SUPPORTED (memory_v2, temperature_v and
                                     # clocks_event_reasons: the newer symbol is missing -> fallbacks)
        errors: {serial: NO_PERMISSION, fan: UNKNOWN, handle: NO_PERMISSION}  # any NVML error, per call
                                     # (handle: opening the GPU; field_values, remapped_rows, energy too)
        util: [[0, 90], [60, 2]]     # curves: a number, [[t, v], ...] piecewise-linear, or
        temperature: {points: [[0, 40], [30, 90]], step: false, loop: 120}
        power_w: 250                 # default: from util between idle_power_w and power_limit_w
        util_mem: 40                 # default: 0.6 * util; util default: sum of processes' sm_util
        sm_active: 85                # GPM SM activity % (Hopper+); default: no GPM (isSupportedDevice 0)
        tensor_active: 50            # GPM tensor activity %; default 0.6 * sm_active
        memory_temperature: 70       # HBM Celsius (field value 82); default: GPU temperature + 8
        recovery_action: 0           # NVML's GPU recovery action (0 none, 1 reset, 2 reboot, ...), a curve
        remapped_rows: {correctable: 0, uncorrectable: 1, pending: true, failed: false}
        fan: 55                      # default: from temperature
        orphan_memory_mib: 0         # memory used with no process listed
        ecc_corrected: 0
        ecc_uncorrected: {points: [[0, 0], [20, 2]], step: true}
        mig: {instances: [{gi_id: 1, ci_id: 0, profile: 3g.40gb, memory_mib: 40960, used_mib: 1024}]}
                                     # in MIG mode: no util / per-process util on the parent, processes
                                     # listed per instance (each process names its ``mig: gi_id``)
        processes:
          - pid: 4242
            user: alice              # uid: default deterministic from the name
            command: python train.py --config resnet50.yaml
            memory_mib: 40960        # a curve
            sm_util: [[0, 85], [20, 2]]   # a curve; may exceed 100 (the agent clamps)
            kind: compute            # compute | graphics | compute+graphics | mps (an MPS client)
            mig: 1                   # the MIG GPU instance it runs in (required on a MIG GPU)
            start_offset_s: -7200    # started two hours before the agent
            state: S
            ppid: 4200
            container: <64-hex id>
            pod: <pod uid>
            job: "81234"             # Slurm job id
            hidden: false            # true: /proc unreadable (hidepid) -> unattributed
            start_at: 10             # appears later / stop_at / idle_at / zombie_at (or via timeline)
    timeline:
      - {at: 15, pid: 4242, event: idle}          # start | stop | idle | zombie
      - {at: 12, gpu: 1, event: xid, xid: 79}     # or just {at: 12, gpu: 1, xid: 79}
      - {at: 12.5, gpu: 1, event: lost}           # GPU_IS_LOST from then on (until a 'recover')
      - {at: 40, gpu: 1, event: recover}
      - {at: 50, gpu: 0, event: hang}             # every NVML call on GPU 0 blocks (real time) ...
      - {at: 70, gpu: 0, event: unhang}           # ... until then
      - {at: 20, event: driver_error, code: LIB_RM_VERSION_MISMATCH, duration: 5}
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; annotations only
    from importlib.resources.abc import Traversable


def names() -> list[str]:
    """Names of the bundled scenarios, sorted."""
    return sorted(
        p.name[: -len(".yaml")] for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml")
    )


def path(name: str) -> Traversable:
    """The bundled scenario file ``name`` (a real path on disk unless the agent runs from a zipapp)."""
    if name not in names():
        raise KeyError(f"no bundled scenario {name!r}; known: {', '.join(names())}")
    return resources.files(__name__).joinpath(f"{name}.yaml")


def read(name: str) -> str:
    """The text of bundled scenario ``name``."""
    return path(name).read_text(encoding="utf-8")
