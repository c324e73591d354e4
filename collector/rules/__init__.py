"""gpufleet.collector.rules: the problems gpufleet flags, as rules that report conditions."""
