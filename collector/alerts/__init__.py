"""Alerts: conditions become alerts (pending -> firing -> resolved), grouped, silenced and noted.

- :mod:`.engine`: the alert engine, a listener of the live view that runs the rules and the tick;
- :mod:`.lifecycle`: conditions to alert transitions (``for``, ``keep_firing_for``);
- :mod:`.grouping`: group_by, group_wait / group_interval / repeat_interval;
- :mod:`.silences`: silences and inhibition;
- :mod:`.notes`: notes to the users an alert names, and the "keep" command;
- :mod:`.fingerprint`: an alert's identity from its labels.
"""
