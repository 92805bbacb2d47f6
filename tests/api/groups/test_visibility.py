"""Elastic groups keep the rules every resource keeps (tests/api/resources.py)."""

from tests.api.resources import OwnedResourceRules
from tests.factories import GroupFactory


class TestGroupRules(OwnedResourceRules):
    list_url = "/api/v1/groups/"

    def make(self, request, owner):
        return GroupFactory(user=owner)
