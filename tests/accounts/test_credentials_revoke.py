# ruff: noqa: F811 - pytest fixtures imported from tests.api.conftest
"""Sessions do not outlive the credentials: a password reset, a password change and "log out
everywhere" end every session of the person (console logins, API keys but those kept,
gateway cookies, SSH connections, webhook endpoints), each time with an audit row and an
e-mail to the owner saying what, when and from where (accounts.credentials)."""

from __future__ import annotations

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from gpurental.accounts.credentials import Reason, account_credentials_revoke
from gpurental.accounts.models import ApiKey, AuditEvent, SSHKey, User
from gpurental.accounts.services import ApiKeyRefused, api_key_create, ssh_key_add
from gpurental.notifications.models import WebhookEndpoint
from tests.api.conftest import assert_error, client_for  # noqa: F401 - a fixture
from tests.gateway.test_ssh_keys import public_line

PASSWORD = "the-old-pass-phrase-1"
NEW_PASSWORD = "a-brand-new-pass-phrase-2"


@pytest.fixture
def ssh_keys(alice):
    return {
        name: ssh_key_add(user=alice, public_key=public_line(comment=name), name=name)
        for name in ("work", "home")
    }


def ssh_names(user) -> set[str]:
    return set(SSHKey.objects.filter(user=user).values_list("name", flat=True))


@pytest.fixture
def keys(alice):
    return {name: api_key_create(user=alice, name=name) for name in ("ci", "laptop", "notebook")}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    assert client.get("/dashboard/").status_code == 200
    return client


def still_logged_in(client: Client) -> bool:
    answer = client.get("/dashboard/")
    assert answer.status_code in (200, 302), answer.status_code
    return answer.status_code == 200


def active_names(user) -> set[str]:
    return set(
        ApiKey.objects.filter(user=user, revoked_at__isnull=True).values_list("name", flat=True)
    )


def test_every_key_but_the_kept_ones_is_revoked_and_the_owner_is_told(
    alice, bob, keys, mailoutbox, django_capture_on_commit_callbacks
):
    bobs, _ = api_key_create(user=bob, name="bob's")
    kept = keys["laptop"][0]
    with django_capture_on_commit_callbacks(execute=True):
        done = account_credentials_revoke(
            user=alice,
            reason=Reason.LOGOUT_EVERYWHERE,
            keep_key_ids=[kept.pk],
            ip_address="198.51.100.23",
        )
    assert active_names(alice) == {"laptop"}
    assert {k.name for k in done.revoked_keys} == {"ci", "notebook"}
    assert ApiKey.objects.get(pk=bobs.pk).revoked_at is None  # nobody else's
    assert User.objects.get(pk=alice.pk).credentials_generation == 1 == alice.credentials_generation

    row = AuditEvent.objects.get(action="auth.credentials_revoked", object_id=str(alice.pk))
    assert row.ip_address == "198.51.100.23"
    assert row.changes["reason"] == "logout_everywhere"
    assert sorted(row.changes["api_keys_revoked"]) == sorted(
        keys[n][0].prefix for n in ("ci", "notebook")
    )
    assert row.changes["api_keys_kept"] == [kept.prefix]

    (mail,) = mailoutbox
    assert mail.to == [alice.email]
    assert "198.51.100.23" in mail.body and "Log out everywhere" in mail.body
    assert f"{done.at:%Y-%m-%d %H:%M:%S}" in mail.body
    for name in ("ci", "notebook"):
        assert keys[name][0].prefix in mail.body.split("API keys kept")[0]
    assert kept.prefix in mail.body.split("API keys kept")[1]


def test_keeping_a_key_that_is_not_ones_own_active_key_changes_nothing(alice, bob, keys):
    bobs, _ = api_key_create(user=bob, name="bob's")
    with pytest.raises(ApiKeyRefused) as refused:
        account_credentials_revoke(
            user=alice, reason=Reason.LOGOUT_EVERYWHERE, keep_key_ids=[bobs.pk]
        )
    assert refused.value.field == "keep_api_keys" and str(bobs.pk) in refused.value.message
    assert active_names(alice) == {"ci", "laptop", "notebook"}
    assert User.objects.get(pk=alice.pk).credentials_generation == 0


def test_log_out_everywhere_in_the_console_ends_every_session_this_one_too(
    alice, keys, mailoutbox, django_capture_on_commit_callbacks
):
    here, elsewhere = logged_in(alice), logged_in(alice)
    page = here.get("/logout/everywhere/")
    assert page.status_code == 200
    for name in ("ci", "laptop", "notebook"):
        assert name in page.text  # each key, with a keep box, none ticked
    assert "checked" not in page.text
    with django_capture_on_commit_callbacks(execute=True):
        answer = here.post("/logout/everywhere/", {"keep_api_keys": [keys["ci"][0].pk]})
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    assert not still_logged_in(here)
    assert not still_logged_in(elsewhere)  # no password changed: the generation ended it
    assert active_names(alice) == {"ci"}
    assert len(mailoutbox) == 1


def test_a_password_change_keeps_this_session_and_the_chosen_keys_and_ends_the_rest(
    alice, keys, mailoutbox, django_capture_on_commit_callbacks
):
    alice.set_password(PASSWORD)
    alice.save()
    here, elsewhere = logged_in(alice), logged_in(alice)
    form = here.get("/password/change/")
    assert all(name in form.text for name in ("ci", "laptop", "notebook"))
    with django_capture_on_commit_callbacks(execute=True):
        answer = here.post(
            "/password/change/",
            {
                "old_password": PASSWORD,
                "new_password1": NEW_PASSWORD,
                "new_password2": NEW_PASSWORD,
                "keep_api_keys": [keys["notebook"][0].pk],
            },
        )
    assert answer.status_code == 302, answer.content[:500]
    assert still_logged_in(here)
    assert not still_logged_in(elsewhere)
    assert active_names(alice) == {"notebook"}
    (mail,) = mailoutbox
    assert "password was changed" in mail.body


def test_a_password_reset_ends_every_session_and_revokes_every_key_not_kept(
    client, alice, keys, mailoutbox, django_capture_on_commit_callbacks
):
    elsewhere = logged_in(alice)
    uid = urlsafe_base64_encode(force_bytes(alice.pk))
    token = default_token_generator.make_token(alice)
    form_url = client.get(f"/password/reset/{uid}/{token}/", follow=True).redirect_chain[-1][0]
    page = client.get(form_url)
    assert 'name="keep_api_keys"' in page.text and "checked" not in page.text  # none ticked
    assert "laptop (gpr_" in page.text
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(
            form_url,
            {
                "new_password1": NEW_PASSWORD,
                "new_password2": NEW_PASSWORD,
                "keep_api_keys": [str(keys["laptop"][0].pk)],
            },
        )
    assert done.status_code == 302
    assert not still_logged_in(elsewhere)
    assert active_names(alice) == {"laptop"}
    assert User.objects.get(pk=alice.pk).credentials_generation == 1
    (mail,) = mailoutbox
    assert "password was reset" in mail.body


def test_a_spent_reset_link_says_so_instead_of_a_form(client, alice):
    page = client.get("/password/reset/MQ/set-password/")
    assert page.status_code == 200
    assert "no longer valid" in page.text and 'name="new_password1"' not in page.text


def test_log_out_everywhere_over_the_api(
    client_for, alice, keys, django_capture_on_commit_callbacks
):
    caller = client_for(alice)
    url = "/api/v1/me/log-out-everywhere/"
    refused = caller.post(
        url, {"keep_api_keys": ["00000000-0000-4000-8000-000000000000"]}, format="json"
    )
    assert_error(refused, 400, "invalid", field="keep_api_keys")
    with django_capture_on_commit_callbacks(execute=True):
        answer = caller.post(url, {"keep_api_keys": [str(caller.api_key.pk)]}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert {k["name"] for k in body["api_keys_revoked"]} == {"ci", "laptop", "notebook"}
    assert all(k["revoked_at"] for k in body["api_keys_revoked"])
    assert [k["id"] for k in body["api_keys_kept"]] == [str(caller.api_key.pk)]
    assert caller.get("/api/v1/me/").status_code == 200  # the kept key goes on

    # Without keeping it, the calling key goes too.
    with django_capture_on_commit_callbacks(execute=True):
        assert caller.post(url, {}, format="json").status_code == 200
    assert_error(caller.get("/api/v1/me/"), 401, "authentication_failed")


def test_webhook_endpoints_are_turned_off_until_their_owner_turns_them_on(
    alice, bob, mailoutbox, django_capture_on_commit_callbacks
):
    def endpoint(user, url):
        return WebhookEndpoint.objects.create(user=user, url=url, secret="whsec_x")

    alices = endpoint(alice, "https://hooks.example.com/alice")
    bobs = endpoint(bob, "https://hooks.example.com/bob")
    with django_capture_on_commit_callbacks(execute=True):
        done = account_credentials_revoke(user=alice, reason=Reason.PASSWORD_RESET)
    alices.refresh_from_db()
    bobs.refresh_from_db()
    assert not alices.is_active and bobs.is_active
    assert alices.secret == "whsec_x"  # the owner's receivers need no change once it is back
    assert any(alices.url in line for line in done.also)
    assert alices.url in mailoutbox[0].body


def test_ssh_keys_not_kept_are_removed_so_an_intruder_s_key_stops_opening_instances(
    alice, bob, ssh_keys, mailoutbox, django_capture_on_commit_callbacks
):
    bobs = ssh_key_add(user=bob, public_key=public_line(comment="bob"), name="bob's")
    kept = ssh_keys["home"]
    with django_capture_on_commit_callbacks(execute=True):
        done = account_credentials_revoke(
            user=alice, reason=Reason.PASSWORD_CHANGE, keep_ssh_key_ids=[kept.pk]
        )
    assert ssh_names(alice) == {"home"}
    assert [k.name for k in done.removed_ssh_keys] == ["work"]
    assert SSHKey.objects.filter(pk=bobs.pk).exists()  # nobody else's
    row = AuditEvent.objects.get(action="auth.credentials_revoked", object_id=str(alice.pk))
    assert row.changes["ssh_keys_removed"] == [ssh_keys["work"].fingerprint]
    assert row.changes["ssh_keys_kept"] == [kept.fingerprint]
    (mail,) = mailoutbox
    removed, kept_part = mail.body.split("SSH keys kept, as you chose:")
    assert ssh_keys["work"].fingerprint in removed.split("SSH keys removed:")[1]
    assert kept.fingerprint in kept_part

    with pytest.raises(ApiKeyRefused) as refused:  # someone else's key: nothing changes
        account_credentials_revoke(
            user=alice, reason=Reason.LOGOUT_EVERYWHERE, keep_ssh_key_ids=[bobs.pk]
        )
    assert refused.value.field == "keep_ssh_keys"
    assert ssh_names(alice) == {"home"}


def test_the_reset_form_lists_ssh_keys_to_keep_and_the_api_says_what_it_removed(
    client, client_for, alice, ssh_keys, django_capture_on_commit_callbacks
):
    uid = urlsafe_base64_encode(force_bytes(alice.pk))
    token = default_token_generator.make_token(alice)
    form_url = client.get(f"/password/reset/{uid}/{token}/", follow=True).redirect_chain[-1][0]
    page = client.get(form_url)
    assert 'name="keep_ssh_keys"' in page.text and ssh_keys["work"].fingerprint in page.text
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(
            form_url,
            {
                "new_password1": NEW_PASSWORD,
                "new_password2": NEW_PASSWORD,
                "keep_ssh_keys": [str(ssh_keys["work"].pk)],
            },
        )
    assert done.status_code == 302
    assert ssh_names(alice) == {"work"}

    caller = client_for(alice)
    refused = caller.post(
        "/api/v1/me/log-out-everywhere/",
        {"keep_ssh_keys": ["00000000-0000-4000-8000-000000000000"]},
        format="json",
    )
    assert_error(refused, 400, "invalid", field="keep_ssh_keys")
    with django_capture_on_commit_callbacks(execute=True):
        answer = caller.post("/api/v1/me/log-out-everywhere/", {}, format="json")
    assert answer.status_code == 200, answer.content
    assert [k["fingerprint"] for k in answer.json()["ssh_keys_removed"]] == [
        ssh_keys["work"].fingerprint
    ]
    assert answer.json()["ssh_keys_kept"] == [] and ssh_names(alice) == set()
