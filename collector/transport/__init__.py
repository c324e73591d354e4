"""gpufleet.collector.transport: one agent stream per host, over SSH (asyncssh) or as a local process.

``FleetTransport(hosts, live_view).start()`` is all the daemon needs; the modules below it are
:mod:`.backoff` (retry delays), :mod:`.stream` (framing + validation), :mod:`.hostkeys` (known_hosts),
:mod:`.reach` (TCP + banner before a connect slot), :mod:`.ssh`, :mod:`.local`, :mod:`.zipapp`
(``agent: upload``) and :mod:`.manager`.
"""

from gpufleet.collector.transport.backoff import Backoff
from gpufleet.collector.transport.hostkeys import HostKeyRefused
from gpufleet.collector.transport.manager import FleetTransport, raise_fd_limit

__all__ = ["Backoff", "FleetTransport", "HostKeyRefused", "raise_fd_limit"]
