"""The events a customer is told about: for each, what its data holds, its subject line and
the console page it links to.

A builder turns the keyword context a call site passes to ``notify`` (model objects,
amounts) into plain JSON data, the same for the e-mail templates and the webhook body.
Templates are ``templates/notifications/<event>.txt`` and ``.html``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext_lazy


@dataclass(frozen=True)
class Event:
    name: str
    label: str  # for the preferences page (translated when shown)
    subject: str  # str.format over the data, in the recipient's language (notify)
    build: Callable[[dict], tuple[dict, str]]  # context → (data, console path)


def _money(value) -> str:
    return f"{Decimal(value):.2f}"


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _instance_data(instance, reason: str = "") -> dict:
    return {
        "id": str(instance.pk),
        "name": str(instance),
        "status": instance.status,
        "reason": reason or instance.status_reason,
    }


def _reservation_data(reservation) -> dict:
    return {
        "id": str(reservation.pk),
        "description": str(reservation),
        "status": reservation.status,
        "start": _when(reservation.period.lower),
        "end": _when(reservation.period.upper),
    }


def _instance_event(ctx: dict) -> tuple[dict, str]:
    instance = ctx["instance"]
    data = {"instance": _instance_data(instance, ctx.get("reason", ""))}
    return data, reverse("instance", args=[instance.pk])


def _low_balance(ctx: dict) -> tuple[dict, str]:
    hours = ctx.get("hours_left")
    data = {
        "balance": _money(ctx["balance"]),
        "credit_limit": _money(ctx.get("credit_limit") or 0),
        "hourly_burn": _money(ctx.get("hourly_burn") or 0),
        "hours_left": None if hours is None else f"{Decimal(hours):.1f}",
        "currency": ctx.get("currency") or settings.BILLING_CURRENCY,
    }
    return data, reverse("billing_invoices")


def _spend_stopped(ctx: dict) -> tuple[dict, str]:
    data = {
        "balance": _money(ctx["balance"]),
        "credit_limit": _money(ctx.get("credit_limit") or 0),
        "currency": ctx.get("currency") or settings.BILLING_CURRENCY,
        "instances": [_instance_data(i) for i in ctx.get("instances", [])],
    }
    return data, reverse("dashboard")


def _idle_warning(ctx: dict) -> tuple[dict, str]:
    data, path = _instance_event(ctx)
    data.update(stop_at=_when(ctx["stop_at"]), idle_minutes=ctx["idle_minutes"])
    return data, path


def _workspace_expiring(ctx: dict) -> tuple[dict, str]:
    data, path = _instance_event(ctx)
    data.update(delete_at=_when(ctx["delete_at"]))
    return data, path


def _storage_unpaid(ctx: dict) -> tuple[dict, str]:
    data = {
        "balance": _money(ctx["balance"]),
        "credit_limit": _money(ctx.get("credit_limit") or 0),
        "currency": ctx.get("currency") or settings.BILLING_CURRENCY,
        "delete_at": _when(ctx["delete_at"]),
        "stored": [str(thing) for thing in ctx.get("stored", [])],
    }
    return data, reverse("billing_invoices")


def _idle_stopped(ctx: dict) -> tuple[dict, str]:
    data, path = _instance_event(ctx)
    data.update(idle_minutes=ctx["idle_minutes"])
    return data, path


def _reservation_event(ctx: dict) -> tuple[dict, str]:
    reservation = ctx["reservation"]
    data = {"reservation": _reservation_data(reservation)}
    if ctx.get("instance") is not None:
        data["instance"] = _instance_data(ctx["instance"])
    return data, reverse("reservation", args=[reservation.pk])


def _invoice_issued(ctx: dict) -> tuple[dict, str]:
    invoice = ctx["invoice"]
    data = {
        "invoice": {
            "id": invoice.pk,
            "number": invoice.number,
            "kind": invoice.kind,
            "total": _money(invoice.total),
            "currency": invoice.currency,
            "period_start": invoice.period_start.isoformat(),
            "period_end": invoice.period_end.isoformat(),
            "issued_at": _when(invoice.issued_at),
        }
    }
    return data, reverse("billing_invoice_document", args=[invoice.pk, "pdf"])


def _payment_received(ctx: dict) -> tuple[dict, str]:
    data = {
        "amount": _money(ctx["amount"]),
        "currency": ctx.get("currency") or settings.BILLING_CURRENCY,
        "reference": str(ctx.get("reference", "")),
        "provider": str(ctx.get("provider", "")),
        "balance": None if ctx.get("balance") is None else _money(ctx["balance"]),
    }
    if ctx.get("payment_id"):  # the receipt's own page
        return data, reverse("billing_payment", args=[ctx["payment_id"]])
    return data, reverse("billing_invoices")


def _webhook_circuit_open(ctx: dict) -> tuple[dict, str]:
    endpoint = ctx["endpoint"]
    data = {
        "endpoint": {
            "id": str(endpoint.pk),
            "url": endpoint.url,
            "description": endpoint.description,
            "circuit_opened_at": _when(endpoint.circuit_opened_at),
            "consecutive_failures": endpoint.consecutive_failures,
        },
        "reason": ctx.get("reason", ""),
    }
    return data, reverse("webhook", args=[endpoint.pk])


EVENTS: dict[str, Event] = {
    e.name: e
    for e in [
        Event(
            "low_balance",
            gettext_lazy("Low balance"),
            gettext_lazy("Your balance is low: {balance} {currency}"),
            _low_balance,
        ),
        Event(
            "spend_stopped",
            gettext_lazy("Instances stopped at zero balance"),
            gettext_lazy("Your instances were stopped: balance {balance} {currency}"),
            _spend_stopped,
        ),
        Event(
            "instance_failed",
            gettext_lazy("Instance failed"),
            gettext_lazy("Instance {instance[name]} failed"),
            _instance_event,
        ),
        Event(
            "instance_unreachable",
            gettext_lazy("Instance unreachable"),
            gettext_lazy("Instance {instance[name]} is unreachable"),
            _instance_event,
        ),
        Event(
            "instance_lost",
            gettext_lazy("Instance lost"),
            gettext_lazy("Instance {instance[name]} was lost"),
            _instance_event,
        ),
        Event(
            "instance_recovered",
            gettext_lazy("Instance recovered"),
            gettext_lazy("Instance {instance[name]} was relaunched on another host"),
            _instance_event,
        ),
        Event(
            "instance_recover_failed",
            gettext_lazy("Instance not recovered"),
            gettext_lazy("Instance {instance[name]} could not be relaunched"),
            _instance_event,
        ),
        Event(
            "idle_warning",
            gettext_lazy("Idle warning"),
            gettext_lazy("Instance {instance[name]} is idle and will be stopped"),
            _idle_warning,
        ),
        Event(
            "idle_stopped",
            gettext_lazy("Idle stop"),
            gettext_lazy("Instance {instance[name]} was stopped for being idle"),
            _idle_stopped,
        ),
        Event(
            "workspace_expiring",
            gettext_lazy("Stopped workspace to be deleted"),
            gettext_lazy("The workspace of {instance[name]} will be deleted"),
            _workspace_expiring,
        ),
        Event(
            "storage_unpaid",
            gettext_lazy("Unpaid storage to be deleted"),
            gettext_lazy("Your stored data will be deleted on {delete_at:.10}: no credit left"),
            _storage_unpaid,
        ),
        Event(
            "reservation_starting_soon",
            gettext_lazy("Reservation starting soon"),
            gettext_lazy("Your reservation starts soon: {reservation[description]}"),
            _reservation_event,
        ),
        Event(
            "reservation_started",
            gettext_lazy("Reservation started"),
            gettext_lazy("Your reservation has started: {reservation[description]}"),
            _reservation_event,
        ),
        Event(
            "reservation_ending",
            gettext_lazy("Reservation ending"),
            gettext_lazy("Your reservation ends soon: {reservation[description]}"),
            _reservation_event,
        ),
        Event(
            "invoice_issued",
            gettext_lazy("Invoice issued"),
            gettext_lazy("Invoice {invoice[number]} issued: {invoice[total]} {invoice[currency]}"),
            _invoice_issued,
        ),
        Event(
            "payment_received",
            gettext_lazy("Payment received"),
            gettext_lazy("Payment received: {amount} {currency}"),
            _payment_received,
        ),
        Event(
            "webhook_circuit_open",
            gettext_lazy("Webhook endpoint turned off after failures"),
            gettext_lazy("Webhook circuit open: nothing more is sent to {endpoint[url]}"),
            _webhook_circuit_open,
        ),
    ]
}
