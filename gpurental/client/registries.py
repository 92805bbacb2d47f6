"""Your own images in the SDK. Registry logins: ``client.registry_logins.save(registry, username, password)
/ list() / delete(id or registry)``. A launch of ``image="<registry>/<repo>:<tag>"`` pulls
with the login saved for its registry; the password never comes back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
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


def _id_of(items, wanted: str, noun: str) -> str:
    """The id of the item whose id, name or registry is ``wanted``; GpuRentalError if none."""
    for item in items:
        if wanted in (item.id, getattr(item, "name", None), getattr(item, "registry", None)):
            return item.id
    raise GpuRentalError(f"no {noun} {wanted!r}")


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
        login_id = (
            login.id
            if isinstance(login, RegistryLogin)
            else _id_of(self.list(), login, "registry login for")
        )
        self._client._request("DELETE", f"registry-logins/{quote(login_id, safe='')}/")


@dataclass
class SavedImage:
    """One of your saved images: launch it with ``create_instance(image=saved.reference)``."""

    id: str
    name: str
    reference: str
    status: str  # saving, ready, failed
    status_reason: str
    size_bytes: int
    created_at: datetime | None
    monthly_cost: Decimal | None  # what keeping it costs a month, in ``raw["currency"]``
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> SavedImage:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no saved image")
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            reference=data.get("reference", ""),
            status=data.get("status", ""),
            status_reason=data.get("status_reason", ""),
            size_bytes=int(data.get("size_bytes") or 0),
            created_at=_parse_time(data.get("created_at")),
            monthly_cost=_money(data.get("monthly_cost")),
            raw=data,
        )


class SavedImages:
    """``client.saved_images``: ``list()``, ``get(id)``, ``delete(id or name)``, and
    ``save(instance, name, wait=True)``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[SavedImage]:
        return [SavedImage.from_api(item) for item in self._client._list("saved-images/")]

    def get(self, image_id: str) -> SavedImage:
        return SavedImage.from_api(
            self._client._get_json(f"saved-images/{quote(image_id, safe='')}/")
        )

    def save(
        self, instance: Any, name: str, *, wait: bool = True, timeout: float = 1800
    ) -> SavedImage:
        """Save a running or stopped instance as the image ``name``; with ``wait``, until it is ready
        (GpuRentalError when it fails, with the host's reason)."""
        image = SavedImage.from_api(
            self._client._request(
                "POST",
                f"instances/{self._client._quote(instance)}/save-image/",
                json_body={"name": name},
            )
        )
        deadline = time.monotonic() + timeout
        while wait and image.status == "saving":
            if time.monotonic() > deadline:
                raise GpuRentalError(f"image {name} is still saving after {timeout:.0f} s")
            time.sleep(1)
            image = self.get(image.id)
        if image.status == "failed":
            raise GpuRentalError(f"saving image {name} failed: {image.status_reason}")
        return image

    def delete(self, image: SavedImage | str) -> None:
        """Delete a saved image, by its id or its name."""
        image_id = (
            image.id if isinstance(image, SavedImage) else _id_of(self.list(), image, "saved image")
        )
        self._client._request("DELETE", f"saved-images/{quote(image_id, safe='')}/")


@dataclass
class Volume:
    """One of your volumes: it lives on ``host`` and outlives the instances that mount it."""

    id: str
    name: str
    host: str
    size_gb: int
    used_bytes: int
    in_use: bool
    mount_path: str
    monthly_cost: Decimal | None  # what keeping it costs a month, in ``raw["currency"]``
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> Volume:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no volume")
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            host=data.get("host", ""),
            size_gb=int(data.get("size_gb") or 0),
            used_bytes=int(data.get("used_bytes") or 0),
            in_use=bool(data.get("in_use")),
            mount_path=data.get("mount_path", ""),
            monthly_cost=_money(data.get("monthly_cost")),
            raw=data,
        )


class Volumes:
    """``client.volumes``: ``create(name, size_gb, host)``, ``list()``, ``delete(id or
    name)``, ``detach(id or name)``; mount them with ``create_instance(volumes={"name":
    "/data"})``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Volume]:
        return [Volume.from_api(item) for item in self._client._list("volumes/")]

    def create(
        self, name: str, size_gb: int, host: str | None = None, *, zone: str | None = None
    ) -> Volume:
        """A volume on ``host``, or in ``zone`` (on a host the platform picks there)."""
        if bool(host) == bool(zone):
            raise ValueError("pass either host= or zone=")
        body = {"name": name, "size_gb": size_gb, **({"host": host} if host else {"zone": zone})}
        return Volume.from_api(self._client._request("POST", "volumes/", json_body=body))

    def delete(self, volume: Volume | str) -> None:
        volume_id = (
            volume.id if isinstance(volume, Volume) else _id_of(self.list(), volume, "volume")
        )
        self._client._request("DELETE", f"volumes/{quote(volume_id, safe='')}/")

    def resize(self, volume: Volume | str, size_gb: int) -> Volume:
        """Make it larger (never smaller); billed at the new size from now."""
        volume_id = (
            volume.id if isinstance(volume, Volume) else _id_of(self.list(), volume, "volume")
        )
        path = f"volumes/{quote(volume_id, safe='')}/resize/"
        return Volume.from_api(self._client._request("POST", path, json_body={"size_gb": size_gb}))

    def detach(self, volume: Volume | str) -> Volume:
        """Take it from the stopped instance that holds it: the next launch on its host may
        mount it, and that instance starts again without it."""
        volume_id = (
            volume.id if isinstance(volume, Volume) else _id_of(self.list(), volume, "volume")
        )
        path = f"volumes/{quote(volume_id, safe='')}/detach/"
        return Volume.from_api(self._client._request("POST", path))


@dataclass
class Snapshot:
    """A volume's files in the operator's object storage; ``restore`` makes a new volume
    from it on any host."""

    id: str
    name: str
    volume: str  # the snapshotted volume's id, or "" for a /workspace's
    instance: str  # the instance whose /workspace it holds, or ""
    source_name: str  # what it is a snapshot of
    status: str  # saving, ready, failed
    status_reason: str
    size_bytes: int
    monthly_cost: Decimal | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_api(cls, data: Any) -> Snapshot:
        if not isinstance(data, dict):
            raise GpuRentalError("the server sent no snapshot")
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            volume=str(data.get("volume") or ""),
            instance=str(data.get("instance") or ""),
            source_name=data.get("source_name", ""),
            status=data.get("status", ""),
            status_reason=data.get("status_reason", ""),
            size_bytes=int(data.get("size_bytes") or 0),
            monthly_cost=_money(data.get("monthly_cost")),
            raw=data,
        )


class Snapshots:
    """``client.snapshots``: ``create(volume, name)``, ``list()``, ``get(id)``,
    ``restore(snapshot, host, name)``, ``delete(id or name)``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Snapshot]:
        return [Snapshot.from_api(item) for item in self._client._list("snapshots/")]

    def get(self, snapshot_id: str) -> Snapshot:
        return Snapshot.from_api(
            self._client._get_json(f"snapshots/{quote(snapshot_id, safe='')}/")
        )

    def _id(self, snapshot: Snapshot | str) -> str:
        return (
            snapshot.id
            if isinstance(snapshot, Snapshot)
            else _id_of(self.list(), snapshot, "snapshot")
        )

    def create(
        self, volume: Volume | str, name: str, *, wait: bool = True, timeout: float = 6 * 3600
    ) -> Snapshot:
        """Snapshot a volume (free, or its instance stopped); with ``wait``, until it is in
        the storage (GpuRentalError with the host's reason when it fails)."""
        ref = volume.id if isinstance(volume, Volume) else volume
        return self._made({"volume": ref, "name": name}, wait, timeout)

    def create_workspace(
        self, instance: Any, name: str, *, wait: bool = True, timeout: float = 6 * 3600
    ) -> Snapshot:
        """Snapshot a stopped instance's /workspace; launch a new instance from it with
        ``create_instance(..., workspace_from=snapshot)``, on whatever host it lands on."""
        instance_id = getattr(instance, "id", instance)
        return self._made({"instance": str(instance_id), "name": name}, wait, timeout)

    def _made(self, body: dict[str, Any], wait: bool, timeout: float) -> Snapshot:
        name = body["name"]
        snapshot = Snapshot.from_api(self._client._request("POST", "snapshots/", json_body=body))
        deadline = time.monotonic() + timeout
        while wait and snapshot.status == "saving":
            if time.monotonic() > deadline:
                raise GpuRentalError(f"snapshot {name} is still saving after {timeout:.0f} s")
            time.sleep(1)
            snapshot = self.get(snapshot.id)
        if snapshot.status == "failed":
            raise GpuRentalError(f"snapshot {name} failed: {snapshot.status_reason}")
        return snapshot

    def restore(
        self,
        snapshot: Snapshot | str,
        host: str,
        name: str,
        *,
        size_gb: int | None = None,
        wait: bool = True,
        timeout: float = 6 * 3600,
    ) -> Volume:
        """A new volume ``name`` on ``host`` with the snapshot's files; with ``wait``, until
        it can be mounted."""
        body: dict[str, Any] = {"host": host, "name": name}
        if size_gb is not None:
            body["size_gb"] = size_gb
        path = f"snapshots/{quote(self._id(snapshot), safe='')}/restore/"
        volume = Volume.from_api(self._client._request("POST", path, json_body=body))
        deadline = time.monotonic() + timeout
        while wait and volume.raw.get("status") == "restoring":
            if time.monotonic() > deadline:
                raise GpuRentalError(f"volume {name} is still restoring after {timeout:.0f} s")
            time.sleep(1)
            volume = Volume.from_api(
                self._client._get_json(f"volumes/{quote(volume.id, safe='')}/")
            )
        if volume.raw.get("status") == "failed":
            raise GpuRentalError(f"restoring {name} failed: {volume.raw.get('status_reason')}")
        return volume

    def delete(self, snapshot: Snapshot | str) -> None:
        self._client._request("DELETE", f"snapshots/{quote(self._id(snapshot), safe='')}/")


def _money(value: Any) -> Decimal | None:
    """An amount the API sends as a string; None when absent or not a number."""
    try:
        return Decimal(str(value)) if value not in (None, "") else None
    except InvalidOperation:
        return None
