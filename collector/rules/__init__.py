"""Rules: what gpufleet flags, as rules that turn observations into conditions.

- :mod:`.catalog`: every fact about every rule (parameters and defaults, severity, flag, wording, waste);
- :mod:`.base`: what every rule shares (conditions, the host context, selectors);
- :mod:`.wording`: how a condition reads (GPU and process names, Slurm jobs, the "keep" command);
- :mod:`.registry`: rule name -> implementation, and the enabled rules of a config;
- :mod:`.usage`: wasted, idle, stale, orphaned memory;
- :mod:`.patterns`: underused, input-bound, near out-of-memory;
- :mod:`.peers`: idle peers (a job that computes on only some of its GPUs);
- :mod:`.thermal`: overheating, throttling;
- :mod:`.faults`: GPU lost, Xid, ECC;
- :mod:`.hosts`: host down, storage, notifier down, overload, clock skew, over budget;
- :mod:`.identity`: the same GPU UUID on two hosts;
- :mod:`.series`: the windows and means the diagnoses keep.
"""
