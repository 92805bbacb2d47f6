"""The rules every API resource keeps, checked the same way for each.

A resource's tests subclass one of these in ``tests/api/<resource>/test_visibility.py`` and
say where the resource lives and how to make one of its objects; pytest collects the
subclass (its name starts with ``Test``) and runs every rule against that resource.
``tests/api/test_resources.py`` fails when a resource on the router has no such subclass.

``OwnedResourceRules``: alice (owner) and bob (another customer), as in STYLE.md.

- each customer's list shows their own objects and nobody else's;
- the detail is 200 for the owner, and a 404 for another customer: not a 403, and worded
  exactly as for an id that does not exist, so nothing leaks the object's existence;
- anonymous requests get the API's 401 (``not_authenticated``), list and detail;
- an unknown id is a 404 (``not_found``) in the API's one error shape.

``OwnedListRules``: the list rules alone, for a list-only resource (notifications).
``PublicResourceRules``: the catalog, the same for every customer: the 401 and the 404.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import assert_error

UNKNOWN_UUID = "00000000-0000-4000-8000-000000000000"


def rows_of(body) -> list[dict]:
    """The rows of a list answer, paginated (``results``) or not."""
    return body["results"] if isinstance(body, dict) else body


class ResourceRules:
    """Where a resource is, and how its objects are named in URLs."""

    list_url: str  # e.g. "/api/v1/instances/"
    unknown_id: str = UNKNOWN_UUID  # valid for the URL pattern, naming nothing
    id_field: str = "id"  # the field of a row that its detail URL ends with

    def detail_url(self, lookup) -> str:
        return f"{self.list_url}{lookup}/"

    @pytest.fixture
    def anonymous(self, db) -> APIClient:
        return APIClient()

    def test_anonymous_list_is_a_401_in_the_error_shape(self, anonymous):
        assert_error(anonymous.get(self.list_url), 401, "not_authenticated")


class UnknownIdRule:
    """For resources with a detail URL: an id that names nothing is a 404 that names it."""

    def test_an_unknown_id_is_a_404_in_the_error_shape(self, as_alice):
        error = assert_error(as_alice.get(self.detail_url(self.unknown_id)), 404, "not_found")
        assert self.unknown_id in error["message"], error


class OwnedListRules(ResourceRules):
    """A list of objects that belong to a customer. Subclasses define ``make``."""

    def make(self, request, owner):
        """An object of this resource owned by ``owner`` (``request`` gives fixtures)."""
        raise NotImplementedError

    def lookup(self, obj) -> str:
        """How the detail URL names ``obj``."""
        return str(getattr(obj, self.id_field))

    @pytest.fixture
    def alices(self, request, alice):
        return self.make(request, alice)

    @pytest.fixture
    def bobs(self, request, bob):
        return self.make(request, bob)

    def _listed(self, client) -> set[str]:
        response = client.get(self.list_url)
        assert response.status_code == 200, (response.status_code, response.content[:500])
        return {str(row[self.id_field]) for row in rows_of(response.json())}

    def test_each_customer_lists_only_their_own(self, alices, bobs, as_alice, as_bob):
        mine, theirs = self.lookup(alices), self.lookup(bobs)
        assert mine != theirs
        alice_sees, bob_sees = self._listed(as_alice), self._listed(as_bob)
        assert mine in alice_sees and theirs not in alice_sees
        assert theirs in bob_sees and mine not in bob_sees


class OwnedResourceRules(UnknownIdRule, OwnedListRules):
    """Objects that belong to a customer, listed and each read at its own URL."""

    def test_the_owner_reads_the_detail(self, alices, as_alice):
        response = as_alice.get(self.detail_url(self.lookup(alices)))
        assert response.status_code == 200, (response.status_code, response.content[:500])
        assert str(response.json()[self.id_field]) == self.lookup(alices)

    def test_another_customer_gets_the_404_of_an_unknown_id(self, alices, as_bob):
        mine = self.lookup(alices)
        theirs = assert_error(as_bob.get(self.detail_url(mine)), 404, "not_found")
        unknown = assert_error(as_bob.get(self.detail_url(self.unknown_id)), 404, "not_found")
        # Word for word the same answer, but for the id it names: no hint that it exists.
        assert theirs["message"].replace(mine, "<id>") == unknown["message"].replace(
            self.unknown_id, "<id>"
        )

    def test_anonymous_detail_is_a_401_in_the_error_shape(self, alices, anonymous):
        response = anonymous.get(self.detail_url(self.lookup(alices)))
        assert_error(response, 401, "not_authenticated")


class PublicResourceRules(UnknownIdRule, ResourceRules):
    """A resource every customer sees alike (the catalog). ``sample`` names an object."""

    def sample(self, request) -> str:
        raise NotImplementedError

    def test_every_customer_reads_the_same_detail(self, request, as_alice, as_bob):
        url = self.detail_url(self.sample(request))
        alice_reads, bob_reads = as_alice.get(url), as_bob.get(url)
        assert alice_reads.status_code == bob_reads.status_code == 200
        assert alice_reads.json() == bob_reads.json()

    def test_anonymous_detail_is_a_401_in_the_error_shape(self, request, anonymous):
        response = anonymous.get(self.detail_url(self.sample(request)))
        assert_error(response, 401, "not_authenticated")
