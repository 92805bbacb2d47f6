"""The console's Images page and the launch form's own-image field: empty, full and broken,
a team's logins changed only by its admins, and the password never on a page."""

import pytest
from django.urls import reverse

from gpurental.images.models import RegistryCredential
from gpurental.images.services import registry_credential_save
from gpurental.rentals.models import Instance

pytestmark = pytest.mark.django_db


def test_the_page_works_empty_then_saves_lists_and_deletes_a_login(client, alice):
    client.force_login(alice)
    page = client.get(reverse("images")).text
    assert "No registry logins yet" in page
    response = client.post(
        reverse("images"),
        {"registry": "ghcr.io", "username": "alice", "password": "tok-3141"},
        follow=True,
    )
    assert "Login alice@ghcr.io saved." in response.text
    assert "tok-3141" not in response.text
    login = RegistryCredential.objects.get(account=alice)
    response = client.post(reverse("registry_login_delete", args=[login.pk]), follow=True)
    assert "Login for ghcr.io deleted." in response.text
    assert not RegistryCredential.objects.exists()


def test_a_bad_registry_is_shown_on_its_field(client, alice):
    client.force_login(alice)
    page = client.post(
        reverse("images"), {"registry": "not a host", "username": "a", "password": "p"}
    ).text
    assert "a registry is a host name or address" in page
    assert not RegistryCredential.objects.exists()


def test_another_customer_cannot_delete_a_login(client, alice, bob):
    login = registry_credential_save(
        account=alice, registry="ghcr.io", username="a", password="p", actor=alice
    )
    client.force_login(bob)
    assert client.post(reverse("registry_login_delete", args=[login.pk])).status_code == 404
    assert 'id="registry-logins"' not in client.get(reverse("images")).text
    assert RegistryCredential.objects.filter(pk=login.pk).exists()


def test_a_team_member_sees_the_team_s_logins_but_only_admins_change_them(client, alice, bob):
    from gpurental.teams.models import Membership
    from gpurental.teams.services import team_create

    team = team_create(creator=alice, name="Lab")
    Membership.objects.create(team=team, user=bob, role="member")
    registry_credential_save(
        account=team.account, registry="ghcr.io", username="lab", password="p", actor=alice
    )
    client.force_login(bob)
    session = client.session
    session["acting_team"] = team.pk
    session.save()
    page = client.get(reverse("images")).text
    assert "lab" in page and "Save login" not in page
    refused = client.post(reverse("images"), {"registry": "x.io", "username": "b", "password": "p"})
    assert refused.status_code == 403


def test_the_launch_form_takes_your_own_image(
    client, alice, a100, make_host, image, sent, django_capture_on_commit_callbacks
):
    make_host("node1", a100)
    client.force_login(alice)
    ref = "registry.example.com/alice/train:1"
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("launch"),
            {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "own_image": ref},
        )
    instance = Instance.objects.get()
    assert response.status_code == 302 and instance.image_ref == ref
    assert sent[0]["spec"]["image"] == ref


def test_a_malformed_own_image_is_shown_on_its_field_and_nothing_is_launched(
    client, alice, a100, make_host, image, sent
):
    make_host("node1", a100)
    client.force_login(alice)
    page = client.post(
        reverse("launch"),
        {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "own_image": "Bad/Ref"},
    ).text
    assert "must be lowercase letters and digits" in page
    assert not Instance.objects.exists() and not sent


def test_save_as_image_from_the_instance_page_then_listed_and_deleted(
    client, alice, a100, make_host, image, sent, settings, django_capture_on_commit_callbacks
):
    from gpurental.rentals.services import lifecycle as lc
    from gpurental.rentals.services.saving import image_report_receive
    from tests.messages import signed

    settings.PLATFORM_REGISTRY = "127.0.0.1:5999"
    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_report_running(instance_id=str(instance.pk), port=40123, container_id="c")
    client.force_login(alice)
    assert "Save as image" in client.get(reverse("instance", args=[instance.pk])).text
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            reverse("instance_save_image", args=[instance.pk]), {"name": "env1"}, follow=True
        ).text
    assert "Saving env1" in page and 'id="saved-images"' in page
    assert sent[-1]["task"] == "image_save"
    saved = alice.saved_images.get()
    from django.utils import timezone

    image_report_receive(
        message=signed(
            host,
            kind="saved",
            data={"saved_image_id": str(saved.pk), "size_bytes": 2_000_000_000, "digest": ""},
        ),
        now=timezone.now(),
    )
    settings.BILLING_CURRENCY = "USD"
    page = client.get(reverse("images")).text
    assert "Ready" in page and saved.reference in page
    # 2 GB (1.863 GiB) at the migration's 0.05 per GB-month.
    assert '<td class="cost">$0.09</td>' in page
    assert "/launch/?own_image=" in page  # its Launch button fills the launch form in
    launch = client.get(reverse("launch"), {"own_image": saved.reference}).text
    assert f'value="{saved.reference}"' in launch
    page = client.post(reverse("saved_image_delete", args=[saved.pk]), follow=True).text
    assert "Saved image env1 deleted." in page and "No saved images yet." in page


def test_a_bad_name_or_a_stopped_instance_says_why_on_the_instance_page(
    client, alice, bob, a100, make_host, image, sent, settings
):
    from gpurental.rentals.services import lifecycle as lc

    settings.PLATFORM_REGISTRY = "127.0.0.1:5999"
    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    client.force_login(alice)
    page = client.post(
        reverse("instance_save_image", args=[instance.pk]), {"name": "Bad"}, follow=True
    ).text
    assert "must be 1 to 63 lowercase letters" in page
    page = client.post(
        reverse("instance_save_image", args=[instance.pk]), {"name": "ok"}, follow=True
    ).text
    assert "only a running or stopped instance can be saved" in page
    client.force_login(bob)
    assert (
        client.post(reverse("instance_save_image", args=[instance.pk]), {"name": "x"}).status_code
        == 404
    )
