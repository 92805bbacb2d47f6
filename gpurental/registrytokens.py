"""Short-lived tokens for the platform's registry, each good for one repository and the
actions it names (the CNCF distribution's token authentication), so that no host holds a
login that reaches every account's saved images.

The control plane signs each token with its own key (``PLATFORM_REGISTRY_TOKEN_KEY``, an
EC P-256 private key in PEM); the registry trusts the key's self-signed certificate
(``auth.token.rootcertbundle``) and checks the token's issuer, audience, lifetime and
scope on every request. A host gets a token sealed with its command: push and pull of
the one repository it saves an image to, or pull of the one it launches from. Docker
Engine sends it as it is (``registrytoken`` in the request's login). Django-free, like
``registry``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import time
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

ISSUER = "gpurental"
SERVICE = "gpurental-registry"
ACTIONS = frozenset({"pull", "push", "delete"})


def key_create(path: Path) -> None:
    """A new signing key at ``path`` (PEM, readable by its owner only)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_bytes(pem)


def key_load(path: str | Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError(f"{path}: not an EC P-256 private key (openssl ecparam -name prime256v1)")
    return key


def certificate_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The key's self-signed certificate, for the registry's ``rootcertbundle``."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{ISSUER} registry tokens")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def key_id(key: ec.EllipticCurvePrivateKey) -> str:
    """The registry's name for the key (libtrust's): the SHA-256 of its public key in DER,
    240 bits of it in base32, in 12 groups of 4."""
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode()
    return ":".join(b32[i : i + 4] for i in range(0, 48, 4))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(
    key: ec.EllipticCurvePrivateKey,
    *,
    subject: str,
    repository: str,
    actions: tuple[str, ...],
    ttl_s: int,
    now: float | None = None,
) -> str:
    """A JWT (ES256) for ``actions`` on ``repository`` only, for ``ttl_s`` seconds."""
    unknown = set(actions) - ACTIONS
    if unknown or not actions or not repository:
        raise ValueError(f"a registry token names one repository and its actions: {actions!r}")
    issued = int(now if now is not None else time.time())
    header = {"typ": "JWT", "alg": "ES256", "kid": key_id(key)}
    claims = {
        "iss": ISSUER,
        "sub": subject,
        "aud": SERVICE,
        "iat": issued,
        "nbf": issued - 30,  # clocks a little apart
        "exp": issued + ttl_s,
        "jti": uuid.uuid4().hex,
        "access": [{"type": "repository", "name": repository, "actions": sorted(actions)}],
    }
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    r, s = decode_dss_signature(key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def registry_config(cert_path: Path) -> list[str]:
    """The lines of a registry's ``config.yml`` that make it take these tokens only."""
    return [
        "auth:",
        "  token:",
        f"    realm: https://{SERVICE}.invalid/token",  # clients send a token, never ask
        f"    service: {SERVICE}",
        f"    issuer: {ISSUER}",
        f"    rootcertbundle: {cert_path}",
    ]
