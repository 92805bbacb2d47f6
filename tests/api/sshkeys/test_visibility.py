"""SSH keys keep the rules every resource keeps (tests/api/resources.py)."""

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gpurental.accounts.services import ssh_key_add
from tests.api.resources import OwnedResourceRules


def a_public_key() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


class TestSSHKeyRules(OwnedResourceRules):
    list_url = "/api/v1/ssh-keys/"

    def make(self, request, owner):
        return ssh_key_add(user=owner, public_key=a_public_key(), name="laptop")
