"""The one import of asyncssh: every module that speaks SSH takes it from here.

Why: asyncssh (2.24) loads cryptography's DSA support at import, and cryptography 51 deprecated DSA with a
warning printed on stderr. Every ``gpufleet`` command that reaches a host or a remote collector printed it,
and scripts that treat stderr as failure broke. gpufleet never offers DSA keys (asyncssh's defaults and
ours are ed25519, ECDSA and RSA), so that one warning, raised from asyncssh's own modules, is silenced here
before the import; any other warning still shows.
"""

from __future__ import annotations

import warnings

warnings.filterwarnings("ignore", message=r"DSA is deprecated", module=r"asyncssh(\.|$)")

import asyncssh as asyncssh  # noqa: E402  (after the filter: the warning is raised at import)

__all__ = ["asyncssh"]
