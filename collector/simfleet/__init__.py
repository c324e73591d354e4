"""The simulated fleet: fake GPU hosts behind real SSH on 127.0.0.1, for the demo, the tests and the benches.

The service never imports this package; ``gpufleet demo`` and the tests dial it like any fleet.

- :mod:`.fleet`: :class:`SimFleet` (virtual hosts, their SSH servers and agent sessions), the in-process
  :class:`FrameGenerator`, and :func:`collector_yaml`;
- :mod:`.__main__`: ``python -m gpufleet.collector.simfleet`` serves a fleet from its own process.
"""

from gpufleet.collector.simfleet.fleet import SCENARIOS, FrameGenerator, SimFleet, collector_yaml

__all__ = ["SCENARIOS", "FrameGenerator", "SimFleet", "collector_yaml"]
