"""gpufleet.collector.notify"""
