"""gpufleet.collector.alerts"""
