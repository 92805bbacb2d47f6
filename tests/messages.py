"""Messages as a host's agent sends them: signed with the key derived from its token,
with the time it was sent and a nonce."""

from __future__ import annotations

import secrets
import time

from gpurental import protocol


def signed(host, token: str | None = None, **payload) -> dict:
    """``payload`` from ``host`` (a Host with its join token in ``.token``), signed."""
    key = protocol.host_key(token if token is not None else host.token)
    payload = {"host": host.name, "sent_at": time.time(), **payload}
    return protocol.sign(key, {**payload, "nonce": secrets.token_hex(12)})
