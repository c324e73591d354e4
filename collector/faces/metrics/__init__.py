"""Prometheus exposition of the live fleet and the collector's health.

- :mod:`.exporter`: the families, the scrape builder and the ``/metrics`` server;
- :mod:`.exposition`: the text format, written once per scrape with label strings reused;
- :mod:`.dcgm`: dcgm-exporter's ``DCGM_FI_DEV_*`` names, for dashboards built on them.
"""
