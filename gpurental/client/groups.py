"""Elastic groups in the SDK: ``client.apply_group(spec)`` (alias ``create_group``),
``list_groups()``, ``get_group(id)``, ``delete_group(id)``, ``quote_group(spec)``,
``rotate_group_endpoint_key(id, overlap_s=86400)``.

A spec is a dict in the groups' vocabulary (name, min_nodes, max_nodes, scaling_metrics,
warm_pool, …) or its text in JSON, YAML or HCL (``format=`` says which, else the server
guesses from the text).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

from gpurental.client.errors import GpuRentalError, NotFound
from gpurental.client.models import _Bound, _parse_time

if TYPE_CHECKING:
    from gpurental.client.client import Client

FORMATS = ("json", "yaml", "hcl")
# File name endings → spec format, for apply FILE.
EXTENSIONS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".hcl": "hcl", ".tf": "hcl"}


def format_of(path: str | Path) -> str | None:
    """The spec format a file's name says (``.json``, ``.yaml``/``.yml``, ``.hcl``/``.tf``)."""
    return EXTENSIONS.get(Path(path).suffix.lower())


def spec_body(spec: dict[str, Any] | str, format: str | None = None) -> dict[str, Any]:
    """The request body of apply and quote: the spec object, or ``{format, source}``."""
    if isinstance(spec, dict):
        if format not in (None, "json"):
            raise ValueError(f"a dict spec is JSON; format={format!r} is for text")
        return spec
    if not isinstance(spec, str):
        raise TypeError("spec is a dict or the spec's text (JSON, YAML or HCL)")
    if format is not None and format not in FORMATS:
        raise ValueError(f"format is one of {', '.join(FORMATS)}, not {format!r}")
    body: dict[str, Any] = {"source": spec}
    if format:
        body["format"] = format
    return body


@dataclass
class GroupEvent:
    """One entry of a group's history: a scaling decision, a replica change, an apply."""

    id: Any
    kind: str
    from_replicas: int | None
    to_replicas: int | None
    reason: str
    created_at: datetime | None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> GroupEvent:
        return cls(
            id=data.get("id"),
            kind=data.get("kind") or "",
            from_replicas=data.get("from_replicas"),
            to_replicas=data.get("to_replicas"),
            reason=data.get("reason") or "",
            created_at=_parse_time(data.get("created_at")),
        )


@dataclass(frozen=True)
class RotatedKey:
    """A group's new endpoint key (shown this once) and until when the key it replaced
    keeps working (None: it stopped at once)."""

    endpoint_key: str
    previous_key_until: datetime | None


@dataclass
class Group(_Bound):
    """An elastic group: replicas of one image behind ``endpoint_url``. ``raw`` keeps the
    API's dict. ``endpoint_key`` is set only on the answer that created the group (it is
    shown once); ``changes`` says what the apply that returned it changed."""

    id: Any
    name: str
    status: str
    image: str | None
    instance_type: str | None
    gpu_count: int
    port: int | None
    min_nodes: int
    max_nodes: int
    desired_replicas: int
    warm_pool_size: int
    endpoint_url: str
    created_at: datetime | None
    spec: dict[str, Any] | None
    replicas: list[dict[str, Any]]
    load: dict[str, Any] | None
    events: list[GroupEvent]
    price: dict[str, Any] | None
    created: bool
    changes: list[str]
    endpoint_key: str | None
    raw: dict[str, Any] = field(repr=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_api(cls, data: Any, client: Client | None = None) -> Group:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no group")
        return cls(**cls._fields_from(data), raw=data, _client=client)

    @staticmethod
    def _fields_from(data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": data.get("id"),
            "name": data.get("name") or "",
            "status": data.get("status") or "",
            "image": data.get("image"),
            "instance_type": data.get("instance_type"),
            "gpu_count": data.get("gpu_count") or 0,
            "port": data.get("port"),
            "min_nodes": data.get("min_nodes") or 0,
            "max_nodes": data.get("max_nodes") or 0,
            "desired_replicas": data.get("desired_replicas") or 0,
            "warm_pool_size": data.get("warm_pool_size") or 0,
            "endpoint_url": data.get("endpoint_url") or "",
            "created_at": _parse_time(data.get("created_at")),
            "spec": data.get("spec"),
            "replicas": list(data.get("replicas") or []),
            "load": data.get("load"),
            "events": [GroupEvent.from_api(e) for e in data.get("events") or []],
            "price": data.get("price"),
            "created": bool(data.get("created")),
            "changes": list(data.get("changes") or []),
            "endpoint_key": data.get("endpoint_key"),
        }

    def _update(self, data: dict[str, Any]) -> Self:
        # A refresh keeps what only the apply's answer carried.
        kept = {"created": self.created, "changes": self.changes, "key": self.endpoint_key}
        super()._update(data)
        self.created, self.changes, self.endpoint_key = (
            kept["created"],
            kept["changes"],
            kept["key"],
        )
        return self

    def refresh(self) -> Group:
        return self._update(self.client._get_json(f"groups/{_quote(self.id)}/"))

    def delete(self) -> Group:
        """Its replicas terminate, then it is gone (``status`` deleting, then deleted)."""
        return self._update(self.client._request("DELETE", f"groups/{_quote(self.id)}/"))

    def list_events(self) -> list[GroupEvent]:
        """Every event of the group, newest first."""
        items = self.client._list(f"groups/{_quote(self.id)}/events/")
        return [GroupEvent.from_api(e) for e in items]


def _quote(group_id: Any) -> str:
    if isinstance(group_id, Group):
        group_id = group_id.id
    return quote(str(group_id), safe="")


class GroupsMixin:
    """The Client's group methods (``gpurental.client.client.Client`` mixes this in)."""

    def apply_group(self: Client, spec: dict[str, Any] | str, format: str | None = None) -> Group:
        """Create the group the spec names, or change what differs in yours of that name.
        ``group.created`` says which, ``group.changes`` what changed (``[]``: unchanged),
        ``group.endpoint_key`` is the endpoint key, on creation only (shown once)."""
        body = spec_body(spec, format)
        return Group.from_api(self._request("POST", "groups/apply/", json_body=body), client=self)

    create_group = apply_group

    def quote_group(self: Client, spec: dict[str, Any] | str, format: str | None = None) -> dict:
        """The spec checked and priced (``price``: per replica, for min and max replicas,
        the warm pool), creating nothing."""
        return self._request("POST", "groups/quote/", json_body=spec_body(spec, format))

    def list_groups(self: Client) -> list[Group]:
        return [Group.from_api(data, client=self) for data in self._list("groups/")]

    def get_group(self: Client, group_id: Any) -> Group:
        return Group.from_api(self._get_json(f"groups/{_quote(group_id)}/"), client=self)

    def find_group(self: Client, id_or_name: Any) -> Group:
        """A group by its id, or by its name among your live groups."""
        text = str(id_or_name.id if isinstance(id_or_name, Group) else id_or_name)
        if _looks_like_uuid(text):
            return self.get_group(text)
        found = self._list("groups/", {"name": text})
        if not found:
            raise NotFound(f"there is no group named {text!r}", status=404, code="not_found")
        return self.get_group(found[0]["id"])

    def rotate_group_endpoint_key(
        self: Client, group_id: Any, overlap_s: int | None = None
    ) -> RotatedKey:
        """A new endpoint key for the group; the current one keeps opening the endpoint for
        ``overlap_s`` seconds (the server's default, 24 h, when None; 0: it stops now;
        at most 30 days). Rotating again during an overlap stops the older key at once."""
        body = {} if overlap_s is None else {"overlap_s": overlap_s}
        data = self._request(
            "POST", f"groups/{_quote(group_id)}/rotate-endpoint-key/", json_body=body
        )
        if not isinstance(data, dict) or not data.get("endpoint_key"):
            raise GpuRentalError("the server sent no endpoint key")
        return RotatedKey(
            endpoint_key=data["endpoint_key"],
            previous_key_until=_parse_time(data.get("previous_key_until")),
        )

    def delete_group(self: Client, group_id: Any) -> Group:
        """Delete the group: its replicas terminate (``status`` deleting), then it is gone."""
        return Group.from_api(self._request("DELETE", f"groups/{_quote(group_id)}/"), client=self)


def _looks_like_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False
