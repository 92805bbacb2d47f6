import hashlib

import pytest

from gpurental.accounts.models import ApiKey, AuditEvent
from gpurental.accounts.services import api_key_authenticate, api_key_create, api_key_revoke


@pytest.mark.django_db
def test_api_key_is_stored_only_as_a_hash(alice):
    key, raw = api_key_create(user=alice, name="laptop")
    row = ApiKey.objects.get(pk=key.pk)
    assert raw not in {row.prefix, row.key_hash, row.name}
    assert row.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw.startswith(f"gpr_{row.prefix}_")


@pytest.mark.django_db
def test_api_key_authenticates_its_owner_and_records_use(alice):
    _, raw = api_key_create(user=alice, name="laptop")
    key = api_key_authenticate(raw=raw)
    assert key.user == alice
    assert key.last_used_at is not None


@pytest.mark.django_db
def test_wrong_or_revoked_key_is_refused(alice):
    key, raw = api_key_create(user=alice, name="laptop")
    assert api_key_authenticate(raw=raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert api_key_authenticate(raw="not-a-key") is None
    api_key_revoke(key=key, actor=alice)
    assert api_key_authenticate(raw=raw) is None
    assert AuditEvent.objects.filter(action="api_key.revoke", object_id=str(key.pk)).count() == 1


@pytest.mark.django_db
def test_keys_of_an_inactive_user_are_refused(alice):
    _, raw = api_key_create(user=alice, name="laptop")
    alice.is_active = False
    alice.save()
    assert api_key_authenticate(raw=raw) is None
