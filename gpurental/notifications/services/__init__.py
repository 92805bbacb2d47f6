"""Telling customers: ``notify`` (called where things happen), e-mail sending, webhook
endpoints and their health (a backoff of their own, a circuit that opens after failures in
a row), deliveries with retries and re-sends, and preferences.

Split by topic: ``notify`` (preferences, notify, e-mail), ``endpoints`` (what the customer
changes), ``deliveries`` (the POSTs and what their outcomes do to the endpoint)."""

from gpurental.notifications.services.base import public_link
from gpurental.notifications.services.deliveries import (
    LEASE,
    backoff,
    deliveries_due,
    delivery_attempt,
    delivery_resend,
    endpoint_circuit_open,
)
from gpurental.notifications.services.endpoints import (
    endpoint_create,
    endpoint_delete,
    endpoint_reenable,
    endpoint_update,
)
from gpurental.notifications.services.notify import (
    email_send,
    emails_stuck,
    notify,
    preference_set,
    preferences_of,
)

__all__ = [
    "LEASE",
    "backoff",
    "deliveries_due",
    "delivery_attempt",
    "delivery_resend",
    "email_send",
    "emails_stuck",
    "endpoint_circuit_open",
    "endpoint_create",
    "endpoint_delete",
    "endpoint_reenable",
    "endpoint_update",
    "notify",
    "preference_set",
    "preferences_of",
    "public_link",
]
