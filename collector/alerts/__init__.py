"""gpufleet.collector.alerts: the alert lifecycle (pending -> firing -> resolved), grouping, silences."""
