"""Saving an instance as an image, without a host: what the control plane asks, what it
makes of the host's reports, and who may launch the result."""

from __future__ import annotations

import pytest
from django.utils import timezone

from gpurental import protocol
from gpurental.accounts.models import AuditEvent
from gpurental.images.models import SavedImage
from gpurental.images.services import ImageRefused
from gpurental.rentals.exceptions import InvalidTransition
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.saving import (
    image_report_receive,
    image_save_request,
    saved_image_delete,
)
from tests.api.conftest import assert_error
from tests.messages import signed

pytestmark = pytest.mark.django_db
REGISTRY = "127.0.0.1:5999"


@pytest.fixture
def platform(settings):
    settings.PLATFORM_REGISTRY = REGISTRY
    settings.PLATFORM_REGISTRY_USERNAME = "platform"
    settings.PLATFORM_REGISTRY_PASSWORD = "platform-pw"


@pytest.fixture
def running(alice, a100, make_host, image, sent):
    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_report_running(instance_id=str(instance.pk), port=40123, container_id="c")
    instance.refresh_from_db()
    instance.host.token = host.token
    sent.clear()
    return instance


def report(host, kind, **data):
    image_report_receive(message=signed(host, kind=kind, data=data), now=timezone.now())


def test_a_save_asks_the_host_with_the_platform_s_login_sealed_for_it(
    platform, running, alice, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        image = image_save_request(instance=running, name="with-hello", actor=alice)
    assert image.status == "saving" and image.account == alice
    assert image.reference.startswith(f"{REGISTRY}/a{alice.pk}/with-hello:")
    assert image.template == running.image and image.source_instance == running
    [message] = sent
    assert message["task"] == "image_save" and message["queue"] == "host.node1"
    assert message["reference"] == image.reference and message["instance_id"] == str(running.pk)
    assert "platform-pw" not in str(message["sealed"])
    key = protocol.host_keys(protocol.host_root(running.host.token)).spec
    assert protocol.secrets_open(key, message["sealed"])["registry_auth"] == {
        "username": "platform",
        "password": "platform-pw",
        "serveraddress": REGISTRY,
    }
    assert AuditEvent.objects.filter(action="saved_image.requested").exists()


def test_saving_is_refused_when_off_misnamed_taken_or_neither_running_nor_stopped(
    running, alice, settings
):
    with pytest.raises(ImageRefused, match="no PLATFORM_REGISTRY"):
        image_save_request(instance=running, name="x", actor=alice)
    settings.PLATFORM_REGISTRY = REGISTRY
    with pytest.raises(ImageRefused, match="lowercase letters") as caught:
        image_save_request(instance=running, name="Bad Name", actor=alice)
    assert caught.value.field == "name"
    image_save_request(instance=running, name="x", actor=alice)
    with pytest.raises(ImageRefused, match="already have a saved image x"):
        image_save_request(instance=running, name="x", actor=alice)
    lc.instance_stop(instance=running, actor=alice)  # stopping: the container is on its way
    with pytest.raises(InvalidTransition, match="only a running or stopped instance can be"):
        image_save_request(instance=running, name="y", actor=alice)
    lc.instance_report_stopped(instance_id=str(running.pk))
    assert image_save_request(instance=running, name="y", actor=alice).status == "saving"


def test_the_host_s_reports_move_it_to_ready_or_failed_and_nobody_else_s_count(
    platform, running, alice, make_host, a100
):
    image = image_save_request(instance=running, name="a", actor=alice)
    other = make_host("node2", a100)
    report(other, "saved", saved_image_id=str(image.pk), size_bytes=5, digest="sha256:x")
    image.refresh_from_db()
    assert image.status == "saving"  # another host may not speak for this one
    report(running.host, "progress", saved_image_id=str(image.pk), message="pushing", percent=40.0)
    report(running.host, "saved", saved_image_id=str(image.pk), size_bytes=123, digest="sha256:d")
    image.refresh_from_db()
    assert (image.status, image.size_bytes, image.digest) == ("ready", 123, "sha256:d")
    assert image.ready_at is not None
    assert [e.data.get("percent") for e in image.events.all()] == [None, 40.0, None]
    report(running.host, "failed", saved_image_id=str(image.pk), reason="late")
    image.refresh_from_db()
    assert image.status == "ready"  # a late report changes nothing

    second = image_save_request(instance=running, name="b", actor=alice)
    report(running.host, "failed", saved_image_id=str(second.pk), reason="push refused: denied")
    second.refresh_from_db()
    assert second.status == "failed" and second.status_reason == "push refused: denied"


def test_only_its_account_launches_a_saved_image_and_with_its_template(
    platform, running, alice, bob, client_for, sent, django_capture_on_commit_callbacks
):
    image = image_save_request(instance=running, name="a", actor=alice)
    body = {"gpu_model": "a100", "image": image.reference}
    error = assert_error(
        client_for(alice).post("/api/v1/instances/", body, format="json"),
        400,
        "invalid",
        field="image",
    )
    assert "none of your saved images that are ready" in error["message"]  # still saving
    report(running.host, "saved", saved_image_id=str(image.pk), size_bytes=1, digest="sha256:d")
    with django_capture_on_commit_callbacks(execute=True):
        launched = client_for(alice).post("/api/v1/instances/", body, format="json")
    assert launched.status_code == 201, launched.content
    assert launched.json()["image_ref"] == image.reference
    spec = [m for m in sent if m["task"] == "instance_start"][-1]["spec"]
    assert spec["pull"]["auth"]["username"] == "platform"  # the platform's login pulls it
    refused = client_for(bob).post("/api/v1/instances/", body, format="json")
    assert refused.status_code == 400


def test_the_api_saves_lists_and_deletes(platform, running, alice, bob, client_for):
    api = client_for(alice)
    saving = api.post(f"/api/v1/instances/{running.pk}/save-image/", {"name": "n1"}, format="json")
    assert saving.status_code == 202 and saving.json()["status"] == "saving"
    assert assert_error(
        api.post(f"/api/v1/instances/{running.pk}/save-image/", {"name": "N!"}, format="json"),
        400,
        "invalid",
        field="name",
    )
    assert [i["name"] for i in api.get("/api/v1/saved-images/").json()["results"]] == ["n1"]
    assert client_for(bob).get("/api/v1/saved-images/").json()["results"] == []
    image_id = saving.json()["id"]
    assert client_for(bob).get(f"/api/v1/saved-images/{image_id}/").status_code == 404
    # While it saves it cannot be deleted; once failed (no digest: nothing in the registry) it can.
    assert api.delete(f"/api/v1/saved-images/{image_id}/").status_code == 400
    report(running.host, "failed", saved_image_id=image_id, reason="x")
    assert api.delete(f"/api/v1/saved-images/{image_id}/").status_code == 204
    assert api.get("/api/v1/saved-images/").json()["results"] == []
    assert SavedImage.objects.get(pk=image_id).status == "deleted"
    lc.instance_stop(instance=running, actor=alice)
    stopped = api.post(f"/api/v1/instances/{running.pk}/save-image/", {"name": "n2"}, format="json")
    assert_error(stopped, 409, "invalid_state")


def test_a_saved_image_s_name_is_free_again_once_deleted(platform, running, alice):
    first = image_save_request(instance=running, name="same", actor=alice)
    report(running.host, "failed", saved_image_id=str(first.pk), reason="x")
    saved_image_delete(image=first, actor=alice)
    assert image_save_request(instance=running, name="same", actor=alice).status == "saving"


def test_a_report_without_a_saved_image_id_is_refused_and_audited(platform, running):
    from gpurental.fleet.hostlink import MessageRefused

    with pytest.raises(MessageRefused):
        report(running.host, "saved", saved_image_id="not-a-uuid", size_bytes=1, digest="x")
    assert AuditEvent.objects.filter(action="host.image report_refused").exists()


def test_a_save_that_can_no_longer_finish_fails_and_frees_its_name(platform, running, alice):
    from datetime import timedelta

    from gpurental.rentals.services.saving import saved_images_expire

    now = timezone.now()
    host = running.host
    stalled = image_save_request(instance=running, name="slow", actor=alice, now=now)
    host.last_heartbeat_at = now + timedelta(hours=5)
    host.save(update_fields=["last_heartbeat_at"])
    assert saved_images_expire(now=now + timedelta(hours=5)) == 0  # still within its time
    assert saved_images_expire(now=now + timedelta(hours=7)) == 1
    stalled.refresh_from_db()
    assert stalled.status == "failed" and "within 6 h" in stalled.status_reason

    silent = image_save_request(instance=running, name="slow", actor=alice, now=now)
    host.last_heartbeat_at = now - timedelta(hours=1)  # lost: past HOST_LOST_AFTER
    host.save(update_fields=["last_heartbeat_at"])
    assert saved_images_expire(now=now) == 1
    silent.refresh_from_db()
    assert silent.status == "failed" and "went silent" in silent.status_reason
    assert [e.to_status for e in silent.events.all() if e.to_status] == ["saving", "failed"]


@pytest.fixture
def platform_tokens(settings, tmp_path):
    from gpurental import registrytokens

    key = tmp_path / "registry-token.pem"
    registrytokens.key_create(key)
    settings.PLATFORM_REGISTRY = REGISTRY
    settings.PLATFORM_REGISTRY_TOKEN_KEY = str(key)
    return registrytokens.key_load(key)


def claims_of(token: str, key) -> dict:
    """The token's claims, once its ES256 signature checks out with ``key``."""
    import base64
    import json

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    def unb64(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    header, payload, signature = token.split(".")
    raw = unb64(signature)
    key.public_key().verify(
        encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")),
        f"{header}.{payload}".encode(),
        ec.ECDSA(hashes.SHA256()),
    )
    assert json.loads(unb64(header))["alg"] == "ES256"
    return json.loads(unb64(payload))


def test_with_a_token_key_each_host_gets_a_token_for_one_repository_only(
    platform_tokens, running, alice, sent, client_for, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        image = image_save_request(instance=running, name="with-hello", actor=alice)
    [message] = sent
    key = protocol.host_keys(protocol.host_root(running.host.token)).spec
    auth = protocol.secrets_open(key, message["sealed"])["registry_auth"]
    assert set(auth) == {"registrytoken", "serveraddress"} and auth["serveraddress"] == REGISTRY
    claims = claims_of(auth["registrytoken"], platform_tokens)
    assert claims["access"] == [
        {"type": "repository", "name": f"a{alice.pk}/with-hello", "actions": ["pull", "push"]}
    ]
    assert (claims["iss"], claims["aud"], claims["sub"]) == (
        "gpurental",
        "gpurental-registry",
        "host node1",
    )
    assert claims["exp"] - claims["iat"] == 6 * 3600  # as long as a save may take

    # The launch of the saved image: a token to pull that one image.
    report(running.host, "saved", saved_image_id=str(image.pk), size_bytes=1, digest="sha256:d")
    sent.clear()
    body = {"gpu_model": "a100", "image": image.reference}
    with django_capture_on_commit_callbacks(execute=True):
        launched = client_for(alice).post("/api/v1/instances/", body, format="json")
    assert launched.status_code == 201, launched.content
    spec = [m for m in sent if m["task"] == "instance_start"][-1]["spec"]
    pull = claims_of(spec["pull"]["auth"]["registrytoken"], platform_tokens)
    assert pull["access"] == [
        {"type": "repository", "name": f"a{alice.pk}/with-hello", "actions": ["pull"]}
    ]


def test_a_token_names_one_repository_and_known_actions(platform_tokens):
    from gpurental import registrytokens

    for repository, actions in (("", ("pull",)), ("a1/x", ()), ("a1/x", ("pull", "*"))):
        with pytest.raises(ValueError, match="one repository and its actions"):
            registrytokens.token(
                platform_tokens, subject="s", repository=repository, actions=actions, ttl_s=60
            )


def test_the_registry_s_certificate_and_config_come_from_the_key(settings, tmp_path):
    from io import StringIO

    from django.core.management import CommandError, call_command

    settings.PLATFORM_REGISTRY_TOKEN_KEY = str(tmp_path / "key.pem")
    out, err = StringIO(), StringIO()
    call_command("registry_token_cert", "--create", stdout=out, stderr=err)
    assert out.getvalue().startswith("-----BEGIN CERTIFICATE-----")
    assert "issuer: gpurental" in err.getvalue() and "service: gpurental-registry" in err.getvalue()
    assert (tmp_path / "key.pem").stat().st_mode & 0o077 == 0  # its owner's only
    with pytest.raises(CommandError, match="not overwritten"):
        call_command("registry_token_cert", "--create", stdout=out, stderr=err)
