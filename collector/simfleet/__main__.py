"""``python -m gpufleet.collector.simfleet``: serve a simulated fleet from its own process."""

from gpufleet.collector.simfleet.fleet import main

main()
