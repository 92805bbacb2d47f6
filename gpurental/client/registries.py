"""Registry logins in the SDK: ``client.registry_logins.save(registry, username, password)
/ list() / delete(id or registry)``. A launch of ``image="<registry>/<repo>:<tag>"`` pulls
with the login saved for its registry; the password never comes back."""

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
class RegistryLogin:
    id: str
    registry: str
    username: str
    created_at: datetime | None
    updated_at: datetime | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> RegistryLogin:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no registry login")
        return cls(
            id=str(data.get("id", "")),
            registry=data.get("registry", ""),
            username=data.get("username", ""),
            created_at=_parse_time(data.get("created_at")),
            updated_at=_parse_time(data.get("updated_at")),
            raw=data,
        )


class RegistryLogins:
    """``client.registry_logins``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[RegistryLogin]:
        return [RegistryLogin.from_api(item) for item in self._client._list("registry-logins/")]

    def save(self, registry: str, username: str, password: str) -> RegistryLogin:
        """Save the login for ``registry`` (host[:port]); one saved before is replaced."""
        body = {"registry": registry, "username": username, "password": password}
        return RegistryLogin.from_api(
            self._client._request("POST", "registry-logins/", json_body=body)
        )

    def delete(self, login: RegistryLogin | str) -> None:
        """Delete a login, by its id or its registry's name."""
        if isinstance(login, RegistryLogin):
            login_id = login.id
        else:
            matches = [item.id for item in self.list() if login in (item.id, item.registry)]
            if not matches:
                raise GpuRentalError(f"no registry login for {login!r}")
            login_id = matches[0]
        self._client._request("DELETE", f"registry-logins/{quote(login_id, safe='')}/")
