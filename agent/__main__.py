"""``python -m gpufleet.agent`` (and the collector's zipapp, whose __main__ calls the same function)."""

import sys

from gpufleet.agent.main import main

sys.exit(main())
