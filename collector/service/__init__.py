"""The collector service: one process that wires the parts together and runs until told to stop.

- :mod:`.daemon`: start-up in dependency order, serve, clean shutdown;
- :mod:`.workers`: several collector processes on one machine, each a shard of the hosts;
- :mod:`.gcpause`: the cycle collector's thresholds for a long-running daemon, and pauses for big builds.
"""
