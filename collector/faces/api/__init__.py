"""The collector's query API: JSON lines over a local Unix socket, for the ``gpufleet`` CLI.

Protocol (one JSON object per line each way, any number of requests per connection):
request ``{"op": "status", "args": {...}, "v": 1}``; response ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "unknown host 'n9' (known: n1, n2)"}``. Errors a person can cause are one line.

A Unix socket (not TCP) because it is local-only by construction: its file mode (0600 by default, 0660 with
``api.group``) says who can connect, and the peer's credentials (``SO_PEERCRED``) say who is asking, for
every op (:mod:`.access`). A refused op answers ``{"ok": false, "error": "permission denied: ...", "code":
"permission_denied"}``.

``status`` takes ``form``: ``"objects"`` (the default, the public shape ``gpufleet status --json`` prints) or
``"rows"`` (compact: arrays under a column list, what the CLI's screen asks for; see
:func:`gpufleet.collector.model.codec.fleet_view_rows`). A collector that predates ``form`` ignores it and
answers objects, which the CLI reads too. The server keeps the encoded answer to an *unfiltered* status
request for ``status_cache_ttl`` seconds (0.5 by default, half the agents' sampling interval), so an answer
may be that much older than its request (its ``generated_at`` says when it was built); filtered requests are
always built fresh.

- :mod:`.ops`: arguments, dispatch, the op handlers (the CLI's read-only fallback uses its StoreOps);
- :mod:`.access`: who may do what;
- :mod:`.server`: the socket, framing, the status cache.
"""
