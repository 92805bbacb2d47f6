# The API clients of tests/api, for the fleet tests that go through the API (zones).
from tests.api.conftest import as_alice, client_for  # noqa: F401 - fixtures
