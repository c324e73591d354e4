"""gpufleet agent: reads NVML and /proc on a GPU host, writes wire-protocol frames to stdout.

Standard library + nvidia-ml-py only (the fake backend also uses PyYAML, imported lazily), so it can ship
as a zipapp.
"""

__version__ = "0.1.0"
