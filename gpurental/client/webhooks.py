"""Outgoing webhooks in the SDK: ``client.webhooks.list() / get(id) / create(url, …) /
update(id, …) / delete(id)``, and the delivery log: ``deliveries(endpoint=None) /
delivery(id) / resend(id)``. The endpoint's signing secret is in ``create``'s answer only."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpurental.client.errors import GpuRentalError
from gpurental.client.models import _parse_time

if TYPE_CHECKING:
    from gpurental.client.client import Client


@dataclass
class WebhookEndpoint:
    """A URL your events are POSTed to, signed (HMAC-SHA256 over timestamp and body)."""

    id: str
    url: str
    description: str
    events: list[str]  # empty: every event
    is_active: bool
    created_at: datetime | None
    secret: str | None  # only in the answer to create(); keep it to check signatures
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> WebhookEndpoint:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no webhook endpoint")
        return cls(
            id=str(data.get("id", "")),
            url=data.get("url", ""),
            description=data.get("description", ""),
            events=list(data.get("events") or []),
            is_active=bool(data.get("is_active", False)),
            created_at=_parse_time(data.get("created_at")),
            secret=data.get("secret"),
            raw=data,
        )


@dataclass
class WebhookDelivery:
    """One event sent to one endpoint: its attempts and the answers they got."""

    id: str
    endpoint: str
    event: str
    status: str  # pending, delivered or failed
    attempts: int
    last_status_code: int | None
    created_at: datetime | None
    delivered_at: datetime | None
    next_attempt_at: datetime | None
    body: Any
    attempt_log: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> WebhookDelivery:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no webhook delivery")
        return cls(
            id=str(data.get("id", "")),
            endpoint=str(data.get("endpoint", "")),
            event=data.get("event", ""),
            status=data.get("status", ""),
            attempts=int(data.get("attempts") or 0),
            last_status_code=data.get("last_status_code"),
            created_at=_parse_time(data.get("created_at")),
            delivered_at=_parse_time(data.get("delivered_at")),
            next_attempt_at=_parse_time(data.get("next_attempt_at")),
            body=data.get("body"),
            attempt_log=list(data.get("attempt_log") or []),
            raw=data,
        )


class Webhooks:
    """``client.webhooks``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[WebhookEndpoint]:
        return [WebhookEndpoint.from_api(item) for item in self._client._list("webhooks/")]

    def get(self, endpoint_id: Any) -> WebhookEndpoint:
        return WebhookEndpoint.from_api(self._client._get_json(f"webhooks/{_id(endpoint_id)}/"))

    def create(
        self,
        url: str,
        *,
        events: list[str] | None = None,
        description: str = "",
        is_active: bool = True,
    ) -> WebhookEndpoint:
        """Register ``url``; ``events`` empty or None: every event. The answer's ``secret``
        is shown this once."""
        body = {
            "url": url,
            "events": list(events or []),
            "description": description,
            "is_active": is_active,
        }
        return WebhookEndpoint.from_api(self._client._request("POST", "webhooks/", json_body=body))

    def update(
        self,
        endpoint_id: Any,
        *,
        url: str | None = None,
        events: list[str] | None = None,
        description: str | None = None,
        is_active: bool | None = None,
    ) -> WebhookEndpoint:
        """Change what is given (the secret stays)."""
        body: dict[str, Any] = {}
        if url is not None:
            body["url"] = url
        if events is not None:
            body["events"] = list(events)
        if description is not None:
            body["description"] = description
        if is_active is not None:
            body["is_active"] = is_active
        path = f"webhooks/{_id(endpoint_id)}/"
        return WebhookEndpoint.from_api(self._client._request("PATCH", path, json_body=body))

    def delete(self, endpoint_id: Any) -> None:
        self._client._request("DELETE", f"webhooks/{_id(endpoint_id)}/")

    def deliveries(self, endpoint: Any = None) -> list[WebhookDelivery]:
        """The delivery log, newest first; only ``endpoint``'s when given."""
        params = {"endpoint": _raw_id(endpoint)} if endpoint is not None else None
        items = self._client._list("webhook-deliveries/", params)
        return [WebhookDelivery.from_api(item) for item in items]

    def delivery(self, delivery_id: Any) -> WebhookDelivery:
        path = f"webhook-deliveries/{_id(delivery_id)}/"
        return WebhookDelivery.from_api(self._client._get_json(path))

    def resend(self, delivery_id: Any) -> WebhookDelivery:
        """Send a delivery again now: the same body and event id, a fresh signature."""
        path = f"webhook-deliveries/{_id(delivery_id)}/resend/"
        return WebhookDelivery.from_api(self._client._request("POST", path))


def _raw_id(value: Any) -> str:
    if isinstance(value, WebhookEndpoint | WebhookDelivery):
        value = value.id
    return str(value)


def _id(value: Any) -> str:
    return quote(_raw_id(value), safe="")
