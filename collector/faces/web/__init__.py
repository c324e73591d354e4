"""The collector's read-only web page (``web:`` in gpufleet.yaml).

- :mod:`.server`: the HTTP endpoints, the token, and the broadcaster of live updates;
- :mod:`.model`: the page's model (the status view, reshaped) and the deltas between two of them;
- :mod:`.http`: the shared HTTP server's responses with the page's security headers;
- ``static/``: the page, its script and its style.
"""
