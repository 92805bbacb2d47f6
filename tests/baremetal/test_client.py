"""Dedicated hosts from the SDK and the ``gpurental`` command, against the real API on a
live server (pytest-django's ``live_server``)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.baremetal.models import Lease as LeaseRow
from gpurental.client import Client, NoCapacity, NotFound, cli


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GPURENTAL_API_KEY", raising=False)
    monkeypatch.delenv("GPURENTAL_URL", raising=False)
    monkeypatch.setenv("GPURENTAL_CONFIG", str(tmp_path / "config" / "config.json"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def server(live_server, alice, whole_host_plan, leasable, image, settings):
    settings.BILLING_CURRENCY = "USD"
    leasable("node1", last_heartbeat_at=datetime.now(UTC))
    _, key = api_key_create(user=alice, name="cli")
    return live_server.url, key


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_sdk_books_launches_into_and_ends_a_lease(server, bob, image):
    url, key = server
    with Client(api_key=key, base_url=url) as client:
        (plan,) = client.dedicated.plans()
        assert plan["slug"] == "h100-host"
        lease = client.dedicated.book("h100-host", hours=2)
        assert (lease.host, lease.status, lease.reserved) == ("node1", "active", False)
        instance = client.dedicated.launch(lease.id, image.slug)
        assert instance.gpu_count == 4
        assert [item.id for item in client.dedicated.list()] == [lease.id]
        ended = client.dedicated.end(lease.id)
        assert ended.status == "ended" and ended.instance_id == str(instance.id)
        start = datetime.now(UTC) + timedelta(days=1)
        ahead = client.dedicated.book("h100-host", start=start, hours=2)
        assert (ahead.status, ahead.reserved) == ("booked", True)
        with pytest.raises(NoCapacity):
            client.dedicated.book("h100-host", start=start + timedelta(hours=1), hours=2)
    _, bobs_key = api_key_create(user=bob, name="bob")
    with Client(api_key=bobs_key, base_url=url) as other, pytest.raises(NotFound):
        other.dedicated.get(lease.id)


def test_the_cli_lists_plans_leases_a_host_and_cancels_a_booking(server, capsys, monkeypatch):
    url, key = server
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", url)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, _ = run(capsys, "dedicated-plans")
    assert code == 0 and "h100-host" in out and "4x h100-80gb" in out
    start = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    code, out, _ = run(
        capsys, "--json", "lease", "h100-host", "--start", start.isoformat(), "--hours", "2"
    )
    assert code == 0, out
    lease = json.loads(out)
    assert (lease["status"], lease["reserved"]) == ("booked", True)
    code, out, _ = run(capsys, "leases")
    assert code == 0 and f"lease {lease['id']}: booked, node1" in out
    code, out, _ = run(capsys, "lease-cancel", lease["id"])
    assert code == 0 and "cancelled" in out
    assert LeaseRow.objects.get(pk=lease["id"]).status == "cancelled"
    code, _, err = run(capsys, "lease-end", lease["id"])
    assert code == 6 and "only an active lease ends" in err  # invalid state
