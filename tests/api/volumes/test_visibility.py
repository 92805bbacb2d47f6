"""Volumes keep the rules every resource keeps (tests/api/resources.py)."""

import uuid

from gpurental.volumes.services import volume_create
from tests.api.resources import OwnedResourceRules
from tests.factories import HostFactory


class TestVolumeRules(OwnedResourceRules):
    list_url = "/api/v1/volumes/"

    def make(self, request, owner):
        host = HostFactory(name=f"h-{uuid.uuid4().hex[:6]}", status="active")
        return volume_create(account=owner, name="data", size_gb=10, host=host, actor=owner)


class TestSnapshotRules(OwnedResourceRules):
    list_url = "/api/v1/snapshots/"

    def make(self, request, owner):
        from gpurental.volumes.models import Snapshot

        volume = TestVolumeRules().make(request, owner)
        return Snapshot.objects.create(
            account=owner,
            name="snap",
            volume=volume,
            object_key=f"snapshots/{owner.pk}/{volume.pk}.tar",
        )
