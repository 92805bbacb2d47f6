"""SSH keys in the SDK: ``client.ssh_keys.list() / get(id) / add(public_key) / delete(id)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpurental.client.errors import GpuRentalError
from gpurental.client.models import _parse_time

if TYPE_CHECKING:
    from gpurental.client.client import Client


@dataclass
class SSHKey:
    """One of your SSH public keys; the SSH gateway lets it into your running instances."""

    id: str
    name: str
    algorithm: str
    fingerprint: str
    public_key: str
    created_at: datetime | None
    last_used_at: datetime | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> SSHKey:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no SSH key")
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            algorithm=data.get("algorithm", ""),
            fingerprint=data.get("fingerprint", ""),
            public_key=data.get("public_key", ""),
            created_at=_parse_time(data.get("created_at")),
            last_used_at=_parse_time(data.get("last_used_at")),
            raw=data,
        )


class SSHKeys:
    """``client.ssh_keys``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[SSHKey]:
        return [SSHKey.from_api(item) for item in self._client._list("ssh-keys/")]

    def get(self, key_id: Any) -> SSHKey:
        return SSHKey.from_api(self._client._get_json(f"ssh-keys/{_quote(key_id)}/"))

    def add(self, public_key: str | Path, name: str = "") -> SSHKey:
        """Add a key: its OpenSSH line (``ssh-ed25519 AAAA… comment``) or a ``.pub`` file's path."""
        if isinstance(public_key, Path):
            public_key = public_key.read_text()
        body = {"public_key": public_key, "name": name}
        return SSHKey.from_api(self._client._request("POST", "ssh-keys/", json_body=body))

    def delete(self, key_id: Any) -> None:
        self._client._request("DELETE", f"ssh-keys/{_quote(key_id)}/")


def _quote(key_id: Any) -> str:
    if isinstance(key_id, SSHKey):
        key_id = key_id.id
    return quote(str(key_id), safe="")
