"""Registry logins keep the rules every resource keeps (tests/api/resources.py)."""

from gpurental.images.services import registry_credential_save
from tests.api.resources import OwnedResourceRules


class TestRegistryLoginRules(OwnedResourceRules):
    list_url = "/api/v1/registry-logins/"

    def make(self, request, owner):
        return registry_credential_save(
            account=owner, registry="ghcr.io", username="me", password="s3cret", actor=owner
        )
