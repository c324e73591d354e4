"""gpufleet command line."""
