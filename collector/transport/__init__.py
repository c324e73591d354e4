"""gpufleet.collector.transport"""
