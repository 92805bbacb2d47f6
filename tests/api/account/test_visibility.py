"""API keys keep the rules every resource keeps (tests/api/resources.py)."""

from gpurental.accounts.services import api_key_create
from tests.api.resources import OwnedResourceRules


class TestApiKeyRules(OwnedResourceRules):
    list_url = "/api/v1/api-keys/"

    def make(self, request, owner):
        key, _raw = api_key_create(user=owner, name="spare")
        return key
