"""Customers' SSH public keys: what the platform accepts, and how it names them.

Pure functions, no ORM: ``ssh_public_key_parse`` turns what a customer pastes into the
one line the SSH gateway compares logins against, or says which rule it breaks.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import asyncssh
from django.utils.translation import gettext as _

# What OpenSSH itself still offers by default; DSA is gone from it, RSA needs 2048 bits.
ALLOWED_ALGORITHMS = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-rsa",
)
RSA_MIN_BITS = 2048
MAX_LENGTH = 16_384


class SSHKeyRefused(ValueError):
    """A key the platform does not take; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str = "public_key"):
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class ParsedKey:
    algorithm: str
    line: str  # "<algorithm> <base64>", without the comment
    fingerprint: str  # "SHA256:…"
    comment: str


def ssh_public_key_parse(text: str) -> ParsedKey:
    """Parse one OpenSSH public key line (``ssh-ed25519 AAAA… comment``)."""
    text = (text or "").strip()
    if not text:
        raise SSHKeyRefused(_("public_key: required; paste the contents of ~/.ssh/id_ed25519.pub"))
    if len(text) > MAX_LENGTH:
        raise SSHKeyRefused(_("public_key: longer than %(most)s characters") % {"most": MAX_LENGTH})
    if "PRIVATE KEY" in text:
        raise SSHKeyRefused(
            _(
                "public_key: this is a private key; never share it. Paste the public key "
                "(the .pub file, e.g. ~/.ssh/id_ed25519.pub)"
            )
        )
    if len(text.splitlines()) > 1:
        raise SSHKeyRefused(_("public_key: one key per line; add keys one at a time"))
    words = text.split(maxsplit=2)
    if words[0] in ("ssh-dss", "dsa"):
        raise SSHKeyRefused(
            _("public_key: DSA keys are not accepted (OpenSSH has dropped them); use ssh-ed25519")
        )
    if words[0].endswith("-cert-v01@openssh.com"):
        raise SSHKeyRefused(
            _("public_key: certificates are not accepted; paste a plain public key")
        )
    if words[0] not in ALLOWED_ALGORITHMS:
        raise SSHKeyRefused(
            _(
                "public_key: not an OpenSSH public key line; expected '<algorithm> <base64> "
                "[comment]' with algorithm one of %(algorithms)s"
            )
            % {"algorithms": ", ".join(ALLOWED_ALGORITHMS)}
        )
    try:
        key = asyncssh.import_public_key(text)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise SSHKeyRefused(
            _("public_key: not a valid %(algorithm)s public key (%(error)s)")
            % {"algorithm": words[0], "error": exc}
        ) from exc
    algorithm = key.algorithm.decode()
    if algorithm != words[0]:
        raise SSHKeyRefused(
            _("public_key: the key's data is %(data)s, but the line says %(line)s")
            % {"data": algorithm, "line": words[0]}
        )
    if algorithm == "ssh-rsa" and key.pyca_key.key_size < RSA_MIN_BITS:
        raise SSHKeyRefused(
            _(
                "public_key: RSA keys need at least %(most)s bits, this one has %(bits)s; "
                "make a new one with ssh-keygen -t ed25519"
            )
            % {"most": RSA_MIN_BITS, "bits": key.pyca_key.key_size}
        )
    return ParsedKey(
        algorithm=algorithm,
        line=f"{algorithm} {base64.b64encode(key.public_data).decode()}",
        fingerprint=key.get_fingerprint("sha256"),
        comment=(key.get_comment() or "")[:100],
    )
