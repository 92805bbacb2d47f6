"""Console pages work empty, full and broken, and show nobody else's instances."""

import pytest
from django.urls import reverse

from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import api_key_create
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc

S = InstanceStatus


@pytest.fixture
def launched(alice, a100, make_host, image, sent):
    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_report_running(instance_id=str(instance.pk), port=40123, container_id="c")
    instance.refresh_from_db()
    return instance


def test_catalog_is_public_and_works_empty(client, db):
    response = client.get("/")
    assert response.status_code == 200
    assert "No GPU matches" in response.text


def test_catalog_shows_free_and_total_and_filters(client, a100, make_host):
    make_host("node1", a100, count=4)
    page = client.get("/").text
    assert "A100 80GB SXM" in page and "4 / 4" in page
    assert "A100" not in client.get("/", {"interconnect": "pcie"}).text.split("<tbody>")[1]


def test_launch_form_goes_straight_to_the_instance_page(
    client, alice, a100, make_host, image, sent
):
    make_host("node1", a100)
    client.force_login(alice)
    response = client.post(
        reverse("launch"), {"gpu_model": a100.slug, "gpu_count": 2, "image": image.slug}
    )
    assert response.status_code == 302 and "/instances/" in response["Location"]
    page = client.get(response["Location"]).text
    assert "Pending" in page and "queued" in page and "2× A100 80GB SXM" in page


def test_launch_without_capacity_shows_the_reason_on_the_form(
    client, alice, a100, make_host, image, sent
):
    make_host("node1", a100, count=1)
    client.force_login(alice)
    response = client.post(
        reverse("launch"), {"gpu_model": a100.slug, "gpu_count": 2, "image": image.slug}
    )
    assert response.status_code == 200
    assert "no 2× A100 free on any host" in response.text


def test_instance_page_shows_open_button_only_to_the_owner_while_running(
    client, alice, carol, launched
):
    client.force_login(alice)
    page = client.get(reverse("instance", args=[launched.pk])).text
    assert "Open JupyterLab" in page and launched.jupyter_token not in page
    opened = client.get(reverse("instance_open", args=[launched.pk]))
    assert opened.status_code == 302
    # A one-time link at the instance's own origin; the token never leaves the platform.
    assert opened["Location"].startswith(f"https://{launched.pk}.gw.localhost/_gw/enter?t=")
    assert launched.jupyter_token not in opened["Location"]
    assert opened["Cache-Control"] == "no-store" and opened["Referrer-Policy"] == "no-referrer"
    client.force_login(carol)
    assert "Open JupyterLab" not in client.get(reverse("instance", args=[launched.pk])).text
    assert client.get(reverse("instance_open", args=[launched.pk])).status_code == 404


def test_another_customer_gets_404_for_every_instance_url(client, bob, launched):
    client.force_login(bob)
    assert client.get(reverse("instance", args=[launched.pk])).status_code == 404
    assert client.get(reverse("instance_open", args=[launched.pk])).status_code == 404
    assert client.post(reverse("instance_action", args=[launched.pk, "stop"])).status_code == 404
    launched.refresh_from_db()
    assert launched.status == S.RUNNING


def test_stop_from_the_page(client, alice, launched, sent):
    client.force_login(alice)
    response = client.post(reverse("instance_action", args=[launched.pk, "stop"]), follow=True)
    assert "Stop requested" in response.text
    launched.refresh_from_db()
    assert launched.status == S.STOPPING


def test_start_without_gpus_from_the_page(client, alice, launched, sent):
    lc.instance_stop(instance=launched)
    lc.instance_report_stopped(instance_id=str(launched.pk))
    client.force_login(alice)
    url = reverse("instance", args=[launched.pk])
    page = client.get(url).text
    assert 'id="start-without-gpus"' in page and "Start without GPUs ($0.10/hour)" in page
    action = reverse("instance_action", args=[launched.pk, "start-without-gpus"])
    response = client.post(action, follow=True)
    assert "Start without GPUs requested" in response.text
    assert "none: started without GPUs (no-GPU mode, $0.10/hour)" in response.text
    launched.refresh_from_db()
    assert launched.status == S.PENDING and launched.without_gpus
    assert "0.10" in client.get("/").text.split('class="no-gpu-rate"')[1][:20]


def test_failed_launch_page_and_dashboard_show_the_reason(client, alice, launched):
    failed = lc.instance_launch(
        user=alice, image=launched.image, gpu_model=launched.gpu_model, gpu_count=1
    )
    lc.instance_report_failed(instance_id=str(failed.pk), reason="image x is not on this host")
    client.force_login(alice)
    assert "image x is not on this host" in client.get(reverse("instance", args=[failed.pk])).text
    assert "image x is not on this host" in client.get(reverse("dashboard")).text


def test_api_key_is_shown_once_and_can_be_revoked(client, alice):
    client.force_login(alice)
    page = client.post(
        reverse("api_keys"), {"name": "laptop", "scopes": ["read", "instances"]}
    ).text
    key = ApiKey.objects.get(user=alice)
    assert f"gpr_{key.prefix}_" in page and "not shown again" in page
    assert "not shown again" not in client.get(reverse("api_keys")).text
    client.post(reverse("api_key_revoke", args=[key.pk]))
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_cannot_revoke_someone_elses_key(client, alice, bob):
    key, _ = api_key_create(user=alice, name="x")
    client.force_login(bob)
    assert client.post(reverse("api_key_revoke", args=[key.pk])).status_code == 404


def test_fleet_dashboard_is_staff_only(client, alice, carol, launched):
    client.force_login(alice)
    assert client.get(reverse("fleet")).status_code == 302
    client.force_login(carol)
    page = client.get(reverse("fleet")).text
    assert "node1" in page and "1 / 7" in page and "alice@example.com" in page


def test_staff_can_drain_a_host_and_stop_any_instance(client, carol, launched, sent):
    from gpurental.accounts.models import AuditEvent

    client.force_login(carol)
    client.post(reverse("fleet_host_action", args=[launched.host.pk, "drain"]))
    launched.host.refresh_from_db()
    assert launched.host.status == "draining"
    client.post(reverse("fleet_instance_stop", args=[launched.pk]))
    launched.refresh_from_db()
    assert launched.status == S.STOPPING
    assert AuditEvent.objects.filter(
        action="instance.stop_by_staff", object_id=str(launched.pk)
    ).exists()


@pytest.mark.parametrize("name", ["dashboard", "launch", "api_keys", "password_change"])
def test_pages_need_a_login(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_password_reset_sends_an_email(client, alice, mailoutbox):
    client.post(reverse("password_reset"), {"email": "alice@example.com"})
    assert len(mailoutbox) == 1 and "/password/reset/" in mailoutbox[0].body
