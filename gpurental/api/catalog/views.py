"""The catalog over the API: GPU models (with how many are free now), plans and images."""

from __future__ import annotations

from django.db.models import Count, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets

from gpurental.api.catalog import serializers as s
from gpurental.api.lookups import SLUG_RE, LookupMixin
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan


@extend_schema(tags=["catalog"])
class GPUModelViewSet(LookupMixin, viewsets.ReadOnlyModelViewSet):
    """GPU models with their specs and how many are free now."""

    noun = gettext_lazy("GPU model")
    serializer_class = s.GPUModelSerializer
    lookup_field = "slug"
    lookup_value_regex = SLUG_RE
    queryset = GPUModel.objects.annotate(
        gpus_total=Count("gpus", filter=Q(gpus__is_enabled=True))
    ).order_by("memory_gb", "name")

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}


@extend_schema(tags=["catalog"])
class PlanViewSet(LookupMixin, viewsets.ReadOnlyModelViewSet):
    """Plans on offer: N GPUs of a model with CPU, memory and disk, at an hourly rate."""

    noun = gettext_lazy("plan")
    serializer_class = s.PlanSerializer
    lookup_field = "slug"
    lookup_value_regex = SLUG_RE
    queryset = Plan.objects.filter(is_active=True).select_related("gpu_model")


@extend_schema(tags=["catalog"])
class ImageViewSet(LookupMixin, viewsets.ReadOnlyModelViewSet):
    """Container images to launch (JupyterLab with a framework)."""

    noun = gettext_lazy("image")
    serializer_class = s.ImageSerializer
    lookup_field = "slug"
    lookup_value_regex = SLUG_RE
    queryset = ImageTemplate.objects.filter(is_active=True)
