"""The back-office: every model has a working page; changes are audited; history is read-only."""

import datetime as dt

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from gpurental.accounts.models import AuditEvent, User
from gpurental.billing.models import Invoice, InvoiceStatus
from gpurental.catalog.models import Plan
from gpurental.console.demo import seed_demo
from gpurental.fleet.models import Host, HostStatus


@pytest.fixture
def admin_client(client, db):
    seed_demo()  # the demo data, without the command's DEBUG guard
    client.force_login(User.objects.get(email="admin@example.com"))
    return client


def test_admin_logs_in_and_sees_seeded_plans_and_host(client, db):
    seed_demo()  # the demo data, without the command's DEBUG guard
    response = client.post(
        "/admin/login/?next=/admin/", {"username": "admin@example.com", "password": "admin"}
    )
    assert response.status_code == 302
    plans = client.get("/admin/catalog/plan/")
    assert plans.status_code == 200
    assert "8× A100" in plans.text and "1× H100" in plans.text
    hosts = client.get("/admin/fleet/host/")
    assert "local" in hosts.text


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda m: m._meta.label)
def test_every_admin_changelist_opens(admin_client, model):
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    assert admin_client.get(url).status_code == 200
    assert admin_client.get(url, {"q": "a100"}).status_code == 200


def test_customer_cannot_open_the_back_office(client, db):
    seed_demo()  # the demo data, without the command's DEBUG guard
    client.force_login(User.objects.get(email="demo@example.com"))
    response = client.get("/admin/catalog/plan/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_admin_change_is_recorded_as_audit_event(admin_client):
    plan = Plan.objects.get(slug="a10g-x1")
    url = reverse("admin:catalog_plan_change", args=[plan.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["hourly_rate"] = "1.2500"
    response = admin_client.post(url, data)
    assert response.status_code == 302, (
        response.context["adminform"].form.errors if response.context else ""
    )
    event = AuditEvent.objects.get(action="admin.change", object_id=str(plan.pk))
    assert event.actor_repr == "admin@example.com"
    assert event.changes == {"hourly_rate": "1.2500"}


def test_adding_a_host_shows_its_join_command_once(admin_client):
    response = admin_client.post(
        reverse("admin:fleet_host_add"),
        {
            "name": "gpu-node-7",
            "address": "10.0.0.7",
            "status": HostStatus.ACTIVE,
            "gpu_source": "nvml",
            "hf_cache_dir": "",
            "notes": "",
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            "gpus-TOTAL_FORMS": "0",
            "gpus-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    text = response.text
    assert "Join command for" in text and "GPURENTAL_HOST_TOKEN=" in text
    host = Host.objects.get(name="gpu-node-7")
    assert host.token_hash and host.token_hash not in text
    assert AuditEvent.objects.filter(action="admin.add", object_id=str(host.pk)).exists()
    assert AuditEvent.objects.filter(action="host.rotate_token", object_id=str(host.pk)).exists()


def test_drain_action_changes_status_and_audits(admin_client):
    host = Host.objects.get(name="local")
    admin_client.post(
        reverse("admin:fleet_host_changelist"), {"action": "drain", "_selected_action": [host.pk]}
    )
    host.refresh_from_db()
    assert host.status == HostStatus.DRAINING
    assert AuditEvent.objects.filter(action="host.status", object_id=str(host.pk)).exists()


def test_issued_invoice_is_read_only_in_the_admin(admin_client):
    from gpurental.accounts.models import User

    invoice = Invoice.objects.create(
        user=User.objects.get(email="demo@example.com"),
        number="INV-2026-000001",
        period_start=dt.date(2026, 1, 1),
        period_end=dt.date(2026, 2, 1),
        status=InvoiceStatus.ISSUED,
        issued_at=timezone.now(),
    )
    url = reverse("admin:billing_invoice_change", args=[invoice.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'name="total"' not in page.text  # shown, not editable
    admin_client.post(url, {"total": "999.00"})
    invoice.refresh_from_db()
    assert str(invoice.total) == "0.00"
