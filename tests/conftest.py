import pytest

from tests.factories import UserFactory


@pytest.fixture
def alice(db):
    return UserFactory(email="alice@example.com", full_name="Alice Owner")


@pytest.fixture
def bob(db):
    return UserFactory(email="bob@example.com", full_name="Bob Other")


@pytest.fixture
def carol(db):
    return UserFactory(
        email="carol@example.com", full_name="Carol Staff", is_staff=True, is_superuser=True
    )
