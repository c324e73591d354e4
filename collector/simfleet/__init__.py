"""The simulated fleet: fake GPU hosts behind real SSH on 127.0.0.1, for the demo, the tests and the benches.

The service never imports this package; ``gpufleet demo`` and the tests dial it like any fleet.

- :mod:`.fleet`: :class:`SimFleet` (virtual hosts, their SSH servers and agent sessions) and
  :func:`collector_yaml`;
- :mod:`.frames`: the in-process hosts' pre-encoded frames (:class:`FrameGenerator`);
- :mod:`.__main__`: ``python -m gpufleet.collector.simfleet`` serves a fleet from its own process.
"""

from gpufleet.collector.simfleet.fleet import SCENARIOS, SimFleet, collector_yaml
from gpufleet.collector.simfleet.frames import FrameGenerator

__all__ = ["SCENARIOS", "FrameGenerator", "SimFleet", "collector_yaml"]
