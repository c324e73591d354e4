"""The collector's faces: how people and programs read the running collector.

- :mod:`.api`: the query API on a Unix socket, for the ``gpufleet`` CLI;
- :mod:`.web`: the read-only web page and its live stream;
- :mod:`.metrics`: the Prometheus exposition;
- :mod:`.aioserver`: the small asyncio HTTP server the web page and the metrics share.
"""
