"""Fleet state and accounting: what is true of the fleet now, and what it has cost.

- :mod:`.live`: the live view, the one owner of host state, through which every frame passes;
- :mod:`.query`: the status and hosts views built from live state or stored rows;
- :mod:`.jobs`: per-job efficiency records, written when a job releases its GPUs;
- :mod:`.report`: the waste report (GPU-hours held, used and wasted per user, host and Slurm group).
"""
