# The API clients of tests/api, for the rentals tests that go through the API (clusters).
from tests.api.conftest import as_alice, as_bob, client_for  # noqa: F401 - fixtures
