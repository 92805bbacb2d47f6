"""Idempotency-Key: a retried POST runs once and gets the first answer."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from gpurental.accounts.services import api_key_create
from gpurental.api.idempotency import KEY_TTL, PENDING_TIMEOUT, idempotency_keys_purge
from gpurental.api.instances import views
from gpurental.api.models import IdempotencyKey
from gpurental.rentals.models import Instance
from tests.api.conftest import assert_error

URL = "/api/v1/instances/"
LAUNCH = {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"}


def launch(client, body=LAUNCH, key="k-1"):
    return client.post(URL, body, HTTP_IDEMPOTENCY_KEY=key)


def test_same_key_same_body_replays_the_first_answer(as_alice, node, image):
    first = launch(as_alice)
    assert first.status_code == 201
    again = launch(as_alice)
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Instance.objects.count() == 1
    stored = IdempotencyKey.objects.get()
    assert (stored.method, stored.path, stored.response_status) == ("POST", URL, 201)
    assert len(stored.request_hash) == 64


def test_key_order_in_the_body_does_not_matter(as_alice, node, image):
    launch(as_alice, body={"image": "jupyter-cpu", "gpu_model": "A100", "gpu_count": 1})
    assert launch(as_alice)["Idempotent-Replayed"] == "true"


def test_same_key_different_body_is_422(as_alice, node, image):
    assert launch(as_alice).status_code == 201
    error = assert_error(
        launch(as_alice, body={**LAUNCH, "gpu_count": 2}), 422, "idempotency_key_reused"
    )
    assert (
        "'k-1' was already used for POST /api/v1/instances/ with a different body"
        in (error["message"])
    )
    assert Instance.objects.count() == 1


def test_same_key_on_another_endpoint_is_422(as_alice, running):
    assert as_alice.post(f"{URL}{running.pk}/stop/", HTTP_IDEMPOTENCY_KEY="k-1").status_code == 200
    error = assert_error(launch(as_alice), 422, "idempotency_key_reused")
    assert f"POST {URL}{running.pk}/stop/" in error["message"]


def test_keys_are_per_user(as_alice, as_bob, node, image):
    alices = launch(as_alice)
    bobs = launch(as_bob)
    assert alices.status_code == bobs.status_code == 201
    assert alices.json()["id"] != bobs.json()["id"]
    assert "Idempotent-Replayed" not in bobs
    assert Instance.objects.filter(user__email="bob@example.com").count() == 1


def test_keys_are_per_user_not_per_api_key(as_alice, client_for, alice, node, image):
    other_key = client_for(alice)
    first = launch(as_alice)
    assert launch(other_key).json() == first.json()


def test_without_the_header_every_post_runs(as_alice, node, image):
    as_alice.post(URL, LAUNCH)
    as_alice.post(URL, LAUNCH)
    assert Instance.objects.count() == 2 and not IdempotencyKey.objects.exists()


def test_a_refusal_is_not_remembered(as_alice, make_host, a100, image):
    refused = launch(as_alice)
    assert_error(refused, 409, "no_capacity")
    assert not IdempotencyKey.objects.exists()
    make_host("late", a100, count=1)
    assert launch(as_alice).status_code == 201  # the retry runs once capacity is there


def test_actions_replay_too(as_alice, running, sent, django_capture_on_commit_callbacks):
    url = f"{URL}{running.pk}/stop/"
    with django_capture_on_commit_callbacks(execute=True):
        first = as_alice.post(url, HTTP_IDEMPOTENCY_KEY="stop-1")
        second = as_alice.post(url, HTTP_IDEMPOTENCY_KEY="stop-1")
    assert first.json() == second.json() and second["Idempotent-Replayed"] == "true"
    assert [m["task"] for m in sent].count("instance_stop") == 1
    assert running.events.filter(to_status="stopping").count() == 1


def test_api_key_replay_never_stores_or_repeats_the_secret(as_alice):
    first = as_alice.post("/api/v1/api-keys/", {"name": "ci"}, HTTP_IDEMPOTENCY_KEY="key-1")
    raw = first.json()["key"]
    assert raw.startswith("gpr_")
    again = as_alice.post("/api/v1/api-keys/", {"name": "ci"}, HTTP_IDEMPOTENCY_KEY="key-1")
    assert again.status_code == 201 and again.json()["key"] is None
    assert again.json()["id"] == first.json()["id"]
    assert raw not in str(IdempotencyKey.objects.get().response_body)


def test_a_crash_after_the_action_undoes_it_and_releases_the_key(
    as_alice, node, image, monkeypatch
):
    def crash(*args, **kwargs):
        raise RuntimeError("the process died here")

    monkeypatch.setattr(views.InstanceViewSet, "_detail", crash)
    assert_error(launch(as_alice), 500, "server_error")
    # The launch and its idempotency record commit together, or not at all.
    assert not Instance.objects.exists() and not IdempotencyKey.objects.exists()
    monkeypatch.undo()
    assert launch(as_alice).status_code == 201


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve", "has space"])
def test_malformed_key_is_refused(as_alice, node, image, key):
    assert_error(launch(as_alice, key=key), 400, "invalid", field="Idempotency-Key")
    assert not Instance.objects.exists()


def test_a_stale_pending_key_is_taken_over(as_alice, alice, node, image):
    # A process that died mid-request leaves a pending row behind.
    from django.utils import timezone

    from gpurental.api.idempotency import _request_hash

    IdempotencyKey.objects.create(
        user=alice,
        key="k-1",
        method="POST",
        path=URL,
        request_hash=_request_hash(LAUNCH),
        created_at=timezone.now() - PENDING_TIMEOUT * 2,
    )
    assert launch(as_alice).status_code == 201
    assert IdempotencyKey.objects.get().response_status == 201


def test_expired_keys_are_forgotten_and_purged(as_alice, node, image):
    from django.utils import timezone

    launch(as_alice)
    IdempotencyKey.objects.update(created_at=timezone.now() - KEY_TTL * 2)
    assert launch(as_alice, body={**LAUNCH, "gpu_count": 2}).status_code == 201
    IdempotencyKey.objects.update(created_at=timezone.now() - KEY_TTL * 2)
    assert idempotency_keys_purge() == 1
    assert Instance.objects.count() == 2


@pytest.mark.backend
@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_does_not_run_the_launch_twice(alice, node, image, sent, monkeypatch):
    """The second request arrives while the first is still inside instance_launch."""
    inside, release = threading.Event(), threading.Event()
    real_launch = views.instance_launch

    def slow_launch(**kwargs):
        inside.set()
        assert release.wait(10)
        return real_launch(**kwargs)

    monkeypatch.setattr(views, "instance_launch", slow_launch)
    _, raw = api_key_create(user=alice, name="t")
    answers = {}

    def first_request():
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
            answers["first"] = launch(client)
        finally:
            connection.close()

    thread = threading.Thread(target=first_request)
    thread.start()
    try:
        assert inside.wait(10)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        duplicate = launch(client)
        error = assert_error(duplicate, 409, "idempotency_key_in_progress")
        assert duplicate["Retry-After"] == "1"
        assert "still being processed" in error["message"]
    finally:
        release.set()
        thread.join(20)
    assert answers["first"].status_code == 201
    replay = launch(client)
    assert replay.status_code == 201 and replay.json() == answers["first"].json()
    assert Instance.objects.count() == 1
    assert [m["task"] for m in sent] == ["instance_start"]
