"""Messages as a host's agent sends them: signed with the key derived from its token."""

from __future__ import annotations

import time

from gpurental import protocol


def signed(host, token: str | None = None, **payload) -> dict:
    """``payload`` from ``host`` (a Host with its join token in ``.token``), signed."""
    key = protocol.host_key(token if token is not None else host.token)
    return protocol.sign(key, {"host": host.name, "sent_at": time.time(), **payload})
