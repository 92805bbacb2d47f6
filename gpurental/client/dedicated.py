"""Dedicated hosts in the SDK: ``client.dedicated.plans() / book(...) / list() / get(id) /
launch(id, image) / end(id) / cancel(id)``.

A lease is a whole host for one tenant over [start, end), billed per second: starting now
at the on-demand rate (off-peak discount in its window), booked ahead at the reserved rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpurental.client.errors import GpuRentalError
from gpurental.client.models import Instance, _parse_time

if TYPE_CHECKING:
    from gpurental.client.client import Client


@dataclass
class Lease:
    id: str
    plan: str
    host: str
    status: str  # booked, active, ended, cancelled
    reserved: bool
    start: datetime | None
    end: datetime | None
    charged: Decimal | None
    currency: str
    instance_id: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> Lease:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no lease")
        charged = data.get("charged")
        return cls(
            id=str(data.get("id", "")),
            plan=data.get("plan", ""),
            host=data.get("host", ""),
            status=data.get("status", ""),
            reserved=bool(data.get("reserved")),
            start=_parse_time(data.get("start")),
            end=_parse_time(data.get("end")),
            charged=Decimal(str(charged)) if charged is not None else None,
            currency=data.get("currency", ""),
            instance_id=data.get("instance"),
            raw=data,
        )


def _instant(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.astimezone()  # local time, as the CLI reads times
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class DedicatedHosts:
    """``client.dedicated``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def plans(self) -> list[dict[str, Any]]:
        return self._client._get_json("dedicated-plans/")

    def list(self) -> list[Lease]:
        return [Lease.from_api(item) for item in self._client._list("leases/")]

    def get(self, lease_id: Any) -> Lease:
        return Lease.from_api(self._client._get_json(f"leases/{_quote(lease_id)}/"))

    def book(
        self,
        plan: str,
        *,
        hours: float | Decimal | None = None,
        end: datetime | None = None,
        start: datetime | None = None,
        host_network: bool = False,
    ) -> Lease:
        """Lease a whole host of ``plan``: from ``start`` (default now) for ``hours`` or
        until ``end``."""
        if (hours is None) == (end is None):
            raise ValueError("give hours= or end=, not both")
        if end is None:
            end = (start or datetime.now(UTC)) + timedelta(hours=float(hours))
        body: dict[str, Any] = {"plan": plan, "end": _instant(end), "host_network": host_network}
        if start is not None:
            body["start"] = _instant(start)
        return Lease.from_api(self._client._request("POST", "leases/", json_body=body))

    def launch(self, lease_id: Any, image: str) -> Instance:
        """An instance on every GPU of the leased host."""
        data = self._client._request(
            "POST", f"leases/{_quote(lease_id)}/launch/", json_body={"image": image}
        )
        return self._client._instance(data)

    def end(self, lease_id: Any) -> Lease:
        return Lease.from_api(self._client._request("POST", f"leases/{_quote(lease_id)}/end/"))

    def cancel(self, lease_id: Any) -> Lease:
        return Lease.from_api(self._client._request("POST", f"leases/{_quote(lease_id)}/cancel/"))


def _quote(object_id: Any) -> str:
    return quote(str(object_id), safe="")
