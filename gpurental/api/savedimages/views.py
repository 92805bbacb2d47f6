"""Saved images over the API, per account (a team's when acting for it). Launch one with
``"image": "<its reference>"``; ``POST /instances/<id>/save-image/`` makes one."""

from __future__ import annotations

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from gpurental.api.lookups import OwnedMixin
from gpurental.api.savedimages import serializers as s
from gpurental.images.models import SavedImage, SavedImageStatus
from gpurental.images.services import ImageRefused
from gpurental.rentals.services.saving import saved_image_delete


@extend_schema(tags=["images"])
class SavedImageViewSet(
    OwnedMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your saved images: each launches on any host with `"image": "<reference>"`."""

    scope_area = "instances"
    model = SavedImage
    owner_field = "account"
    noun = gettext_lazy("saved image")
    serializer_class = s.SavedImageSerializer

    def get_queryset(self):
        return super().get_queryset().exclude(status=SavedImageStatus.DELETED)

    def get_serializer_class(self):
        return s.SavedImageDetailSerializer if self.action == "retrieve" else s.SavedImageSerializer

    @extend_schema(
        summary="Delete a saved image (from the registry too)",
        responses={204: OpenApiResponse(description="Deleted")},
    )
    def destroy(self, request, *args, **kwargs):
        try:
            saved_image_delete(image=self.get_object(), actor=request.user)
        except ImageRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
