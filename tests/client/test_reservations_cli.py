"""Reservations, availability, usage and invoices from the SDK and the ``gpurental`` command.

The SDK and the CLI talk to the real API served by a live Django server on 127.0.0.1
(pytest-django's ``live_server``); output formatting and refusals that need no
server use the FakeAPI stand-in.
"""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from gpurental.accounts.services import api_key_create
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.invoicing import invoice_generate, invoice_issue
from gpurental.billing.services.metering import meter_run
from gpurental.client import Client, InvalidState, NoCapacity, NotFound, ValidationError, cli
from gpurental.client.models import Reservation
from gpurental.rentals.models import Reservation as ReservationRow
from gpurental.rentals.services import lifecycle as lc
from tests.billing.conftest import beat
from tests.client.conftest import API_KEY, error

FAKE_RESERVATION = {
    "id": "0b6f1f44-1f7c-4a55-9d3b-2f1f5e6a7b8c",
    "status": "booked",
    "gpu_model": "a100-80gb-sxm",
    "gpu_count": 2,
    "plan": "a100-x2",
    "image": "jupyter-cpu",
    "start": "2026-12-10T10:00:00Z",
    "end": "2026-12-10T14:00:00Z",
    "price": "7.48",
    "refunded": "0.00",
    "refund_if_cancelled_now": "7.48",
    "currency": "USD",
    "host": "node1",
    "gpu_indices": [0, 1],
    "instance": None,
    "created_at": "2026-12-02T10:00:00Z",
    "cancelled_at": None,
    "events": [],
}
FAKE_QUOTE = {
    "plan": "a100-x2",
    "gpu_model": "a100-80gb-sxm",
    "gpu_count": 2,
    "start": "2026-12-10T10:00:00Z",
    "end": "2026-12-10T14:00:00Z",
    "hours": "4.0000",
    "gpu_hours": "8.0000",
    "rate_kind": "reserved",
    "hourly_rate": "1.8700",
    "discount": "0.1500",
    "price": "7.48",
    "currency": "USD",
    "full_refund_until": "2026-12-09T10:00:00Z",
    "late_refund_percent": 50,
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def whole_hour(days: float = 0, hours: float = 0) -> datetime:
    moment = timezone.now() + timedelta(days=days, hours=hours)
    return moment.replace(minute=0, second=0, microsecond=0)


# --- against the live API ---------------------------------------------------------


@pytest.fixture
def server(live_server, alice, a100, image, make_host, settings):
    """The real API on a live server, with one 8× A100 host; alice's key in the env."""
    settings.TIME_ZONE = "UTC"
    settings.BILLING_CURRENCY = "USD"
    make_host("node1", a100, count=8)
    _, key = api_key_create(user=alice, name="cli")
    return live_server.url, key


@pytest.fixture
def logged_in_live(server, monkeypatch):
    url, key = server
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", url)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return server


@pytest.mark.django_db(transaction=True)
def test_sdk_quotes_books_lists_and_cancels(server, alice):
    url, key = server
    start = whole_hour(days=3)
    with Client(api_key=key, base_url=url) as client:
        quote = client.quote(
            gpu_model="A100", gpu_count=2, start=start, end=start + timedelta(hours=4)
        )
        booked = client.book(
            gpu_model="A100",
            gpu_count=2,
            image="jupyter-cpu",
            start=start,
            end=start + timedelta(hours=4),
        )
        listed = client.reservations()
        fetched = client.get_reservation(booked.id)
        free = client.availability("A100", hours=6, start=start - timedelta(hours=1))
        cancelled = client.cancel_reservation(booked)

        with pytest.raises(ValidationError) as refused:
            client.book(
                gpu_model="A100",
                gpu_count=2,
                image="jupyter-cpu",
                start=start - timedelta(days=5),
                end=start,
            )
        with pytest.raises(NotFound):
            client.get_reservation("00000000-0000-0000-0000-000000000000")

    assert quote["price"] == "7.48" and quote["gpu_hours"] == "8.0000"
    assert isinstance(booked, Reservation) and booked.status == "booked"
    assert booked.price == Decimal("7.48") and booked.start == start
    assert booked.host == "node1" and booked.gpu_indices == [0, 1]
    assert [r.id for r in listed] == [booked.id] and fetched.id == booked.id
    assert [h["free"] for h in free["models"][0]["hours"]] == [8, 6, 6, 6, 6, 8]
    assert cancelled.status == "cancelled" and cancelled.refunded == Decimal("7.48")
    assert balance_of(user=alice) == 0
    assert "start" in refused.value.fields


@pytest.mark.django_db(transaction=True)
def test_sdk_refuses_a_time_without_a_zone(server):
    url, key = server
    with Client(api_key=key, base_url=url) as client, pytest.raises(ValueError, match="zone"):
        client.quote(gpu_model="A100", start=datetime(2026, 12, 10, 10), end="2026-12-10T14:00Z")


@pytest.mark.django_db(transaction=True)
def test_cli_reserve_shows_the_quote_then_books(logged_in_live, capsys):
    start = whole_hour(days=2)
    code, out, err = run(
        capsys,
        "reserve",
        "A100",
        "2",
        "--start",
        start.isoformat(),
        "--hours",
        "4",
        "--image",
        "jupyter-cpu",
        "--yes",
    )

    assert code == 0, err
    quote, booked = out.splitlines()[0:2], out.splitlines()[-1]
    assert "8.0000 GPU-hours" in quote[0] and "15 % off" in quote[0]
    assert "Price: 7.48 USD, paid now" in quote[1]
    reservation = ReservationRow.objects.get()
    assert booked.startswith(f"reservation {reservation.pk}: booked, 2x a100-80gb-sxm")
    assert "on node1 (GPUs 0, 1)" in booked and "paid 7.48 USD" in booked

    code, out, _ = run(capsys, "reservations")
    assert code == 0 and str(reservation.pk) in out and "7.48 USD" in out

    code, out, _ = run(capsys, "cancel-reservation", str(reservation.pk), "--yes", "--json")
    assert code == 0 and json.loads(out)["refunded"] == "7.48"


@pytest.mark.django_db(transaction=True)
def test_cli_reserve_without_capacity_exits_5(logged_in_live, capsys):
    from gpurental.accounts.models import User

    User.objects.update(gpu_quota=16)  # the quota would refuse first
    start = whole_hour(days=1)
    argv = ["reserve", "A100", "8", "--start", start.isoformat(), "--hours", "2"]
    assert run(capsys, *argv, "--image", "jupyter-cpu", "--yes")[0] == 0

    code, out, err = run(capsys, *argv, "--image", "jupyter-cpu", "--yes")
    assert code == cli.NO_CAPACITY
    assert "no 8× A100 free on one host" in err


@pytest.mark.django_db(transaction=True)
def test_cli_usage_and_invoices_are_your_own(
    logged_in_live, alice, bob, a100, image, sent, capsys, tmp_path
):
    from gpurental.fleet.models import Host

    node = Host.objects.get(name="node1")
    plan = a100.plans.get(gpu_count=1)
    monday = datetime(2026, 10, 5, 10, tzinfo=UTC)
    for user, name in ((alice, "train"), (bob, "bobs")):
        beat(node, monday)
        instance = lc.instance_launch(user=user, image=image, plan=plan, name=name, now=monday)
        lc.instance_report_running(
            instance_id=str(instance.pk), port=1, container_id="c", now=monday
        )
        beat(node, monday + timedelta(hours=2))
        lc.instance_stop(instance=instance, now=monday + timedelta(hours=2))
        lc.instance_report_stopped(instance_id=str(instance.pk), now=monday + timedelta(hours=2))
    meter_run(now=datetime(2026, 11, 1, 3, tzinfo=UTC))
    mine, bobs = (
        invoice_issue(invoice=invoice_generate(user=user, year=2026, month=10))
        for user in (alice, bob)
    )

    code, out, _ = run(capsys, "usage", "--month", "2026-10")
    assert code == 0 and "train" in out and "bobs" not in out
    assert out.splitlines()[-1].split() == ["total", "-", "-", "2.0000", "4.40"]

    code, out, _ = run(capsys, "usage", "--month", "2026-10", "--csv")
    assert code == 0 and out.startswith("day,instance,") and "train" in out

    code, out, _ = run(capsys, "invoices")
    assert code == 0 and mine.number in out and bobs.number not in out

    pdf = tmp_path / "october.pdf"
    code, out, _ = run(capsys, "invoice", str(mine.pk), "--pdf", str(pdf))
    assert code == 0 and pdf.read_bytes().startswith(b"%PDF")

    code, out, _ = run(capsys, "invoice", str(mine.pk), "--csv", "-")
    assert code == 0 and out.splitlines()[-1].endswith(",4.40,USD")

    code, _, err = run(capsys, "invoice", str(bobs.pk), "--pdf", str(tmp_path / "bobs.pdf"))
    assert code == cli.NOT_FOUND and f"there is no invoice {bobs.pk}" in err
    assert not (tmp_path / "bobs.pdf").exists()


# --- output and refusals, against the FakeAPI ---------------------------------------


@pytest.fixture
def logged_in(api, sleeps, monkeypatch):
    monkeypatch.setenv("GPURENTAL_API_KEY", API_KEY)
    monkeypatch.setenv("GPURENTAL_URL", api.url)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return api


def test_reserve_without_yes_and_no_terminal_books_nothing(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/reservations/quote/", (200, FAKE_QUOTE))

    code, out, err = run(
        capsys, "reserve", "A100", "2", "--start", "2026-12-10T10:00Z", "--end",
        "2026-12-10T14:00Z", "--image", "jupyter-cpu",
    )  # fmt: skip

    assert code == cli.USAGE
    assert "booking charges 7.48 USD now; pass --yes" in err
    assert "Price: 7.48 USD" in out
    assert logged_in.received("POST") == []
    [asked] = logged_in.received("GET")
    assert asked.query == {
        "gpu_model": ["A100"],
        "gpu_count": ["2"],
        "start": ["2026-12-10T10:00:00+00:00"],
        "end": ["2026-12-10T14:00:00+00:00"],
    }


def test_reserve_asks_on_a_terminal(logged_in, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    logged_in.reply("GET", "/api/v1/reservations/quote/", (200, FAKE_QUOTE))
    logged_in.reply("POST", "/api/v1/reservations/", (201, FAKE_RESERVATION))

    code, _, err = run(
        capsys, "reserve", "A100", "2", "--start", "2026-12-10T10:00Z", "--hours", "4",
        "--image", "jupyter-cpu",
    )  # fmt: skip

    assert code == 0 and "Book and pay 7.48 USD? [y/N]" in err
    [posted] = logged_in.received("POST")
    assert posted.body["end"] == "2026-12-10T14:00:00+00:00"
    assert posted.headers.get("Idempotency-Key")


@pytest.mark.parametrize(
    "argv",
    [
        ["reserve", "A100", "2", "--start", "soon", "--hours", "4", "--image", "x"],
        ["reserve", "A100", "0", "--start", "2026-12-10T10:00Z", "--hours", "4", "--image", "x"],
        ["reserve", "A100", "2", "--start", "2026-12-10T10:00Z", "--hours", "-1", "--image", "x"],
        ["reserve", "A100", "2", "--start", "2026-12-10T10:00Z", "--image", "x"],
        ["usage", "--month", "2026-13"],
        ["invoice", "7", "--pdf", "a.pdf", "--csv", "a.csv"],
    ],
)
def test_bad_arguments_exit_2_before_any_request(logged_in, capsys, argv):
    assert run(capsys, *argv)[0] == cli.USAGE
    assert logged_in.requests == []


def test_cancel_reservation_shows_the_refund_and_asks(logged_in, capsys):
    path = f"/api/v1/reservations/{FAKE_RESERVATION['id']}/"
    logged_in.reply("GET", path, (200, {**FAKE_RESERVATION, "refund_if_cancelled_now": "3.74"}))

    code, _, err = run(capsys, "cancel-reservation", FAKE_RESERVATION["id"])

    assert code == cli.USAGE and "cancelling refunds 3.74 USD now; pass --yes" in err
    assert logged_in.received("POST") == []


def test_cancel_reservation_after_its_start_exits_6(logged_in, capsys):
    path = f"/api/v1/reservations/{FAKE_RESERVATION['id']}/cancel/"
    logged_in.reply("POST", path, error(409, "invalid_state", "it has started"))

    code, _, err = run(capsys, "cancel-reservation", FAKE_RESERVATION["id"], "--yes")

    assert code == cli.INVALID_STATE and "it has started" in err


@pytest.fixture
def local_utc(monkeypatch):
    """The CLI shows local times: make local UTC for this test."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_availability_is_one_row_per_day_over_two_days(logged_in, capsys, local_utc):
    start = datetime(2026, 12, 3, tzinfo=UTC)
    hours = [
        {
            "start": (start + timedelta(hours=h)).isoformat(),
            "free": 8 if h < 30 else 2,
            "largest_block": 8 if h < 30 else 1,
        }
        for h in range(72)
    ]
    model = {"gpu_model": "a100-80gb-sxm", "short_name": "A100", "total": 8, "hours": hours}
    body = {"start": start.isoformat(), "hours": 72, "models": [model]}
    logged_in.reply("GET", "/api/v1/availability/", (200, body))

    code, out, _ = run(capsys, "availability", "A100", "--hours", "72")

    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["GPU", "DAY", "FREE", "ONE", "HOST"]
    assert [line.split() for line in lines[1:4]] == [
        ["A100", "2026-12-03", "8-8/8", "8"],
        ["A100", "2026-12-04", "2-8/8", "1"],
        ["A100", "2026-12-05", "2-2/8", "1"],
    ]
    assert logged_in.received()[0].query == {"gpu_model": ["A100"], "hours": ["72"]}


def test_sdk_raises_no_capacity_for_a_full_fleet(client, api):
    api.reply("POST", "/api/v1/reservations/", error(409, "no_capacity", "no 2× A100 free"))
    with pytest.raises(NoCapacity, match="no 2× A100 free"):
        client.book(
            gpu_model="A100",
            gpu_count=2,
            image="x",
            start="2026-12-10T10:00Z",
            end="2026-12-10T14:00Z",
        )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--hours", "0.3333"], "whole minutes"),
        (["--hours", "1e9"], "at most a year"),
        (["--hours", "nan"], "more than 0"),
    ],
)
def test_reserve_refuses_odd_lengths_as_usage_errors(logged_in, capsys, argv, words):
    code, _, err = run(
        capsys, "reserve", "A100", "1", "--start", "2026-12-03T10:00Z", *argv, "--image", "x"
    )
    assert code == cli.USAGE and words in err


@pytest.mark.django_db(transaction=True)
def test_idle_auto_stop_from_the_sdk_and_the_cli(logged_in_live, sent, capsys):
    url, key = logged_in_live
    with Client(api_key=key, base_url=url) as client:
        instance = client.create_instance(
            gpu_type="A100", framework="jupyter-cpu", idle_stop_minutes=90
        )
        assert instance.idle_stop_minutes == 90 and instance.usage["paid_hours"] == 0
        instance.set_idle_policy(0)
        assert instance.idle_stop_minutes == 0

    code, out, _ = run(capsys, "idle-stop", str(instance.id), "45")
    assert code == 0 and "stops after 45 idle minutes" in out
    code, out, _ = run(capsys, "idle-stop", str(instance.id), "off")
    assert code == 0 and "idle auto-stop is off" in out
    code, _, err = run(capsys, "idle-stop", str(instance.id), "5")
    assert code == cli.USAGE and "not 0 (off) or 10–10080 minutes" in err
    code, _, err = run(capsys, "idle-stop", str(instance.id), "soon")
    assert code == cli.USAGE and "not a number of minutes" in err


@pytest.mark.django_db(transaction=True)
def test_a_terminated_reserved_instance_is_launched_again_from_the_sdk_and_the_cli(
    logged_in_live, alice, bob, a100, image, sent, capsys
):
    from gpurental.billing.services import credit_add
    from gpurental.rentals.services import reservations as rs

    url, key = logged_in_live
    credit_add(user=alice, amount=Decimal("100.00"))
    now = timezone.now().replace(second=0, microsecond=0)
    row = rs.reservation_book(
        user=alice,
        image=image,
        gpu_model=a100,
        gpu_count=2,
        start=now,
        end=now + timedelta(hours=2),
        now=now,
    )
    rs.reservations_tick()
    (first,) = row.instances.all()
    with Client(api_key=key, base_url=url) as client:
        reservation = client.get_reservation(row.pk)
        with pytest.raises(InvalidState, match="holds the reserved GPUs"):
            reservation.relaunch()
        lc.instance_terminate(instance=first, actor=alice)
        lc.instance_report_removed(instance_id=str(first.pk))
        second = reservation.relaunch()
    assert second.id != str(first.pk) and second.status == "pending"
    assert second.gpu_indices == [0, 1] and sent[-1]["spec"]["instance_id"] == second.id

    code, _, err = run(capsys, "relaunch", str(row.pk))
    assert code == cli.INVALID_STATE and "is pending" in err
    _, bobs_key = api_key_create(user=bob, name="bob")
    with Client(api_key=bobs_key, base_url=url) as client, pytest.raises(NotFound):
        client.relaunch_reservation(row.pk)
    assert balance_of(user=alice) == Decimal("100.00") - row.price  # nothing more charged
