"""Who may see and touch what: alice (owner), bob (another customer), carol (staff).

Nothing of alice's leaks to bob, not even its existence: he gets the same 404 as for
an id that does not exist. Staff see (and may act on) every instance, but never the
owner's JupyterLab token. API keys are credentials and stay private to their owner.
"""

import uuid

import pytest

from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import api_key_create
from gpurental.rentals.models import Instance
from tests.api.conftest import assert_error

OWNER_STAFF_OTHER = {"alice": 200, "bob": 404, "carol": 200}
OWNER_ONLY = {"alice": 200, "bob": 404, "carol": 404}
MATRIX = {
    ("GET", "instances/"): {"alice": 200, "bob": 200, "carol": 200},
    ("GET", "instances/{instance}/"): OWNER_STAFF_OTHER,
    ("POST", "instances/{instance}/stop/"): OWNER_STAFF_OTHER,
    ("POST", "instances/{instance}/start/"): OWNER_STAFF_OTHER,
    ("POST", "instances/{instance}/restart/"): OWNER_STAFF_OTHER,
    ("POST", "instances/{instance}/terminate/"): OWNER_STAFF_OTHER,
    # Staff may see and act on any instance, but only its owner gets into it.
    ("POST", "instances/{instance}/connect/"): {"alice": 201, "bob": 404, "carol": 404},
    ("GET", "api-keys/"): {"alice": 200, "bob": 200, "carol": 200},
    ("GET", "api-keys/{key}/"): OWNER_ONLY,
    ("DELETE", "api-keys/{key}/"): {"alice": 204, "bob": 404, "carol": 404},
    # Elastic groups, like instances: the owner and staff; the endpoint key never leaks.
    ("GET", "groups/"): {"alice": 200, "bob": 200, "carol": 200},
    ("GET", "groups/{group}/"): OWNER_STAFF_OTHER,
    ("GET", "groups/{group}/events/"): OWNER_STAFF_OTHER,
    ("DELETE", "groups/{group}/"): OWNER_STAFF_OTHER,
}
CASES = [
    pytest.param(method, path, actor, expected, id=f"{method} {path} as {actor}")
    for (method, path), row in MATRIX.items()
    for actor, expected in row.items()
]


@pytest.fixture
def alice_key(alice) -> ApiKey:
    key, _ = api_key_create(user=alice, name="alice's laptop")
    return key


@pytest.fixture
def group(alice):
    from tests.factories import GroupFactory

    return GroupFactory(user=alice)


@pytest.fixture
def people(alice, bob, carol):
    return {"alice": alice, "bob": bob, "carol": carol}


@pytest.mark.parametrize(("method", "path", "actor", "expected"), CASES)
def test_permission_matrix(
    method, path, actor, expected, running, alice_key, group, people, client_for, sent
):
    client = client_for(people[actor])
    url = "/api/v1/" + path.format(instance=running.pk, key=alice_key.pk, group=group.pk)
    before = (Instance.objects.get(pk=running.pk).status, ApiKey.objects.get(pk=alice_key.pk))
    ids = (str(running.pk), str(alice_key.pk), str(group.pk))

    response = client.generic(method, url)

    assert response.status_code == expected, response.content[:300]
    if expected == 404:
        # Exactly what an id that exists nowhere gets.
        fake_id = str(uuid.uuid4())
        fake_url = url
        for real in ids:
            fake_url = fake_url.replace(real, fake_id)
        fake = client.generic(method, fake_url)
        mine = assert_error(response, 404, "not_found")
        nobodys = assert_error(fake, 404, "not_found")
        mine_text = mine["message"]
        for real in ids:
            mine_text = mine_text.replace(real, "ID")
        assert mine_text == nobodys["message"].replace(fake_id, "ID")
        assert mine["fields"] == nobodys["fields"] == {}
        # ... and nothing happened to alice's things.
        after = (Instance.objects.get(pk=running.pk).status, ApiKey.objects.get(pk=alice_key.pk))
        assert after[0] == before[0] and after[1].revoked_at is None
        group.refresh_from_db()
        assert group.status == "active"
    elif path == "instances/":
        ids = {row["id"] for row in response.json()["results"]}
        assert (str(running.pk) in ids) == (actor in {"alice", "carol"})
    elif path == "groups/":
        listed = {row["id"] for row in response.json()["results"]}
        assert (str(group.pk) in listed) == (actor in {"alice", "carol"})
        assert "endpoint_key" not in response.content.decode()
    elif path == "api-keys/":
        ids = {row["id"] for row in response.json()["results"]}
        assert (str(alice_key.pk) in ids) == (actor == "alice")


@pytest.mark.parametrize(("method", "path"), list(MATRIX))
def test_every_object_endpoint_needs_authentication(
    method, path, client, running, alice_key, group
):
    url = "/api/v1/" + path.format(instance=running.pk, key=alice_key.pk, group=group.pk)
    assert_error(client.generic(method, url), 401, "not_authenticated")


def test_staff_see_alices_instance_without_her_jupyter_url(as_alice, as_carol, running):
    url = f"/api/v1/instances/{running.pk}/"
    assert as_alice.get(url).json()["jupyter_url"] == f"https://{running.pk}.gw.localhost/lab"
    staff_view = as_carol.get(url)
    assert staff_view.json()["status"] == "running"
    assert staff_view.json()["jupyter_url"] is None
    assert running.jupyter_token not in staff_view.content.decode()
    listed = as_carol.get("/api/v1/instances/").json()["results"]
    assert [i["jupyter_url"] for i in listed] == [None]


def test_the_jupyterlab_token_never_leaves_the_platform(as_alice, as_carol, running):
    # It is a secret between the gateway and the container: not even the owner sees it.
    for client in (as_alice, as_carol):
        for url in ("/api/v1/instances/", f"/api/v1/instances/{running.pk}/"):
            body = client.get(url).content.decode()
            assert "jupyter_token" not in body and running.jupyter_token not in body
    link = as_alice.post(f"/api/v1/instances/{running.pk}/connect/").content.decode()
    assert running.jupyter_token not in link


def test_staff_action_on_a_customers_instance_is_recorded_as_theirs(as_carol, carol, running):
    response = as_carol.post(f"/api/v1/instances/{running.pk}/stop/")
    assert response.status_code == 200
    event = running.events.filter(to_status="stopping").get()
    assert event.actor == carol
