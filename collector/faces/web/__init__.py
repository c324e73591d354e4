"""The collector's read-only web page (``web:`` in gpufleet.yaml): see :mod:`.server`."""

from gpufleet.collector.faces.web.server import WebServer

__all__ = ["WebServer"]
