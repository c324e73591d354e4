"""gpufleet collector: reaches every host over SSH, stores history, flags problems, notifies."""
