"""Registry passwords: encrypted, not hashed, since a host must log in with them.

Fernet (from ``cryptography``) under a key derived from ``REGISTRY_SECRET_KEY`` (default
``SECRET_KEY``). A database dump alone does not reveal them; rotating the key means
saving the logins again.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(ValueError):
    """Encrypted under another key: the login must be saved again."""


def _fernet() -> Fernet:
    key = settings.REGISTRY_SECRET_KEY.encode()
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"gpurental.registry:" + key).digest()))


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable(
            "this registry login was saved under another REGISTRY_SECRET_KEY: save it again"
        ) from exc
