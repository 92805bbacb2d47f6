"""Keys between the SSH gateway and the sshd inside instances.

- Each run of an instance gets a new host key, made here at launch and at each start; the
  gateway checks the container's sshd against its public half, so nothing on the way can
  stand in for it.
- The gateway logs in to every instance with one client key of its own (its public half is
  the only line in the container's authorized_keys). Customers' keys never reach a host.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings


def new_private_key() -> str:
    """A fresh Ed25519 private key, in OpenSSH's format."""
    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


def public_key_of(private_key: str) -> str:
    """The ``ssh-ed25519 AAAA…`` line of an OpenSSH private key."""
    key = serialization.load_ssh_private_key(private_key.encode(), password=None)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def client_key_path() -> Path:
    return Path(settings.SSH_GATEWAY_CLIENT_KEY)


def client_private_key() -> str:
    """The gateway's client key, made on first use (mode 0600)."""
    path = client_key_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(new_private_key())
    return path.read_text()


def client_public_key() -> str:
    return public_key_of(client_private_key()) + " gpurental-ssh-gateway"
