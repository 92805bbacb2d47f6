"""SSH keys over the API. Each customer sees and deletes only their own keys; another's key
is a 404 worded as if it did not exist."""

from __future__ import annotations

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from gpurental.accounts.models import SSHKey
from gpurental.accounts.services import ssh_key_add, ssh_key_delete
from gpurental.accounts.sshkeys import SSHKeyRefused
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import PersonalMixin
from gpurental.api.sshkeys import serializers as s


@extend_schema(tags=["account"])
class SSHKeyViewSet(
    PersonalMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your SSH public keys: `ssh <instance id>@<SSH gateway>` lets in any of them."""

    # An SSH key is a credential of the account (a way into every instance): adding or
    # deleting one needs the account scope; any key may list them.
    scope_area = "account"
    model = SSHKey
    noun = gettext_lazy("SSH key")
    serializer_class = s.SSHKeySerializer

    @extend_schema(
        summary="Add an SSH public key",
        request=s.SSHKeyCreateSerializer,
        responses={201: s.SSHKeySerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=[
            OpenApiExample(
                "An Ed25519 key",
                value={
                    "name": "laptop",
                    "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGPe4gxyqOrnYdJ5i9kYY0x19"
                    "TrxcqFnIReSuT5htZmO me@laptop",
                },
                request_only=True,
            ),
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.SSHKeyCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            key = ssh_key_add(
                user=request.user,
                public_key=form.validated_data["public_key"],
                name=form.validated_data["name"],
            )
        except SSHKeyRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.SSHKeySerializer(key).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Delete an SSH key (new logins with it are refused)",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        ssh_key_delete(key=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
