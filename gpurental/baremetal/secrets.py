"""BMC passwords: encrypted, not hashed.

The platform itself must log in to the BMC with the password, so a one-way hash (as for
API keys and host tokens) would make it useless. It is encrypted with Fernet
(AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a key derived from
``BMC_SECRET_KEY`` (default: ``SECRET_KEY``). A database dump alone does not reveal it;
whoever holds the key does. Rotating the key means entering the passwords again.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(ValueError):
    """Encrypted under another key (BMC_SECRET_KEY changed): enter the password again."""


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"gpurental.bmc:" + settings.BMC_SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode() if plain else ""


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable(
            "the BMC password was stored under another BMC_SECRET_KEY: enter it again"
        ) from exc
