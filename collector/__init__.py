"""gpufleet collector: reaches every host over SSH, stores history, flags problems, notifies.

A sample flows down this list (a package imports only those above it, but for the service, which wires them):

- :mod:`.model`: the fleet's types and the one classification of a GPU sample (no I/O);
- :mod:`.transport`: one agent stream per host (SSH or local), framing, decoding, budgets;
- :mod:`.fleet`: the live view (host state), the status views, job records and the waste report;
- :mod:`.store`: SQLite history (one writer), rollups, GPU-hours, retention;
- :mod:`.rules`: the rule catalog and the rules that turn samples into conditions;
- :mod:`.alerts`: conditions -> pending -> firing -> resolved, grouping, silences, user notes;
- :mod:`.notify`: notification channels and the dispatcher that delivers to them;
- :mod:`.faces`: the query API, the web page and the Prometheus exposition;
- :mod:`.service`: the daemon that wires the parts, worker processes, gc tuning;
- :mod:`.config`: gpufleet.yaml, loaded into :mod:`.settings` with file:line errors;
- :mod:`.simfleet`: a simulated fleet behind real SSH (the demo, tests, benches; never the service);
- :mod:`.settings`, :mod:`.units`, :mod:`.errors`, :mod:`.addresses`, :mod:`.secrets`, :mod:`.shards`:
  typed settings, units, the error hierarchy, collector addresses, secret references, sharding.
"""
