"""gpufleet.collector.rules"""
