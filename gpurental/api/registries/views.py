"""Registry logins over the API, per account (a team's when acting for it): what a launch
of a private image pulls with. Saving one again for the same registry replaces it."""

from __future__ import annotations

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import OwnedMixin
from gpurental.api.registries import serializers as s
from gpurental.images.models import RegistryCredential
from gpurental.images.services import (
    ImageRefused,
    registry_credential_delete,
    registry_credential_save,
)


@extend_schema(tags=["images"])
class RegistryLoginViewSet(
    OwnedMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Logins to private registries: a launch of `image=<registry>/<repo>:<tag>` pulls with
    the one saved for its registry. Passwords are stored encrypted and sent only to the host
    that pulls, sealed for it."""

    scope_area = "account"
    team_area = "registries"  # a team's logins: its admins change them
    model = RegistryCredential
    owner_field = "account"
    noun = gettext_lazy("registry login")
    serializer_class = s.RegistryLoginSerializer

    @extend_schema(
        summary="Save a registry login (replaces the one saved for that registry)",
        request=s.RegistryLoginSaveSerializer,
        responses={201: s.RegistryLoginSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.RegistryLoginSaveSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            credential = registry_credential_save(
                account=self.owner(request), actor=request.user, **form.validated_data
            )
        except ImageRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(s.RegistryLoginSerializer(credential).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Delete a registry login (launches from that registry then pull anonymously)",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        registry_credential_delete(credential=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
