"""The fleet model: plain types and pure functions, no I/O, cheap to import (the CLI reads only these).

- :mod:`.sample`: a host's snapshot, its GPUs and processes, as the wire decoder builds them;
- :mod:`.views`: what ``status`` and ``hosts`` show (host, GPU, process views, totals, host records);
- :mod:`.summary`: what a view adds up to (its totals, its lines per user);
- :mod:`.codec`: the views and records to JSON and back (the query API's answers, the CLI's reading);
- :mod:`.records`: the rows the store keeps and answers (series, spans, usage, alerts, jobs, silences);
- :mod:`.firing`: which rules fire on which GPU and host, from a list of alerts;
- :mod:`.thresholds`: the classification's parameters, from the rules' config;
- :mod:`.classify`: the one verdict on a GPU sample (busy, idle, stuck, free, orphaned, who holds it);
- :mod:`.facts`: that verdict worked out once per snapshot, for every reader;
- :mod:`.jobkey`: which job a GPU process belongs to;
- :mod:`.procname`: how a process is named to people;
- :mod:`.names`: names as people type them (natural order, globs, unknown-host errors).
"""
