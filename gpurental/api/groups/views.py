"""Elastic groups over the API: apply a spec (JSON, YAML or HCL), quote it, read, delete.

Visibility as for instances: customers see their own groups, staff see all, and anything
else is a 404 worded as if it did not exist. Groups launch instances, so an API key needs
the ``instances`` scope to change them (``read`` to look).
"""

from __future__ import annotations

from datetime import timedelta

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from gpurental.api.groups import serializers as s
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.lookups import UUID_RE, LookupMixin
from gpurental.groups import specs
from gpurental.groups.keys import group_endpoint_key_rotate
from gpurental.groups.models import Group
from gpurental.groups.selectors import group_quote, groups_visible_to
from gpurental.groups.services import group_apply, group_delete
from gpurental.teams.acting import account_of

SPEC_EXAMPLES = [
    OpenApiExample(
        "A spec (JSON)",
        value={
            "name": "inference",
            "min_nodes": 1,
            "max_nodes": 10,
            "instance_type": "A10",
            "scaling_metrics": [{"metric": "gpu_utilization", "threshold": 70}],
            "warm_pool": {"size": 2},
        },
        request_only=True,
    ),
    OpenApiExample(
        "The article's HCL, as text",
        value={"format": "hcl", "source": s.EXAMPLE_HCL},
        request_only=True,
    ),
]
SPEC_BODY = {
    "application/json": {
        "type": "object",
        "description": "Either a spec object (name, min_nodes, max_nodes, instance_type, "
        "scaling_metrics, schedule, warm_pool, cooldown, …) or "
        '{"format": "json"|"yaml"|"hcl", "source": "<the spec as text>"}.',
        "additionalProperties": True,
    }
}


def _spec_source(data) -> tuple[dict | str, str | None]:
    """The request body → (a spec dict, or text and its format)."""
    if not isinstance(data, dict):
        raise specs.SpecError(_("send a JSON object: a spec, or {format, source}"), field="spec")
    if "source" in data:
        form = s.GroupSourceSerializer(data=data)
        form.is_valid(raise_exception=True)
        extra = sorted(set(data) - {"source", "format"})
        if extra:
            raise specs.SpecError(
                _("with source, only format may be sent beside it (not %(field)r)")
                % {"field": extra[0]},
                field=extra[0],
            )
        return form.validated_data["source"], form.validated_data.get("format")
    return dict(data), None


def _forget_key(body: dict) -> dict:
    # The endpoint key is shown once and never stored, not even for an idempotent replay.
    return {**body, "endpoint_key": None}


@extend_schema(tags=["groups"])
class GroupViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Elastic groups: replicas of one image behind one endpoint, scaled by rules."""

    scope_area = "instances"
    team_area = "groups"
    read_actions = ("quote",)  # a POST that changes nothing: a team's viewer may ask a price

    noun = gettext_lazy("group")
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Group.objects.none()
        return groups_visible_to(user=account_of(self.request))

    def get_serializer_class(self):
        return s.GroupSerializer if self.action == "list" else s.GroupDetailSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="Only the group of this name"),
            OpenApiParameter(
                "deleted", bool, description="Include deleted groups (default: false)"
            ),
        ]
    )
    def list(self, request, *args, **kwargs):
        queryset = groups_visible_to(user=account_of(request), with_ready=True)
        if request.query_params.get("deleted", "").lower() not in ("1", "true", "yes"):
            queryset = queryset.exclude(status=Group.Status.DELETED)
        if name := request.query_params.get("name"):
            if "\x00" in name or len(name) > 200:
                raise ValidationError(
                    {"name": [_("a group name: no NUL byte, at most 200 characters")]}
                )
            queryset = queryset.filter(name=name)
        page = self.paginate_queryset(queryset.order_by("name", "created_at"))
        return self.get_paginated_response(s.GroupSerializer(page, many=True).data)

    @extend_schema(
        summary="Create a group from a spec, or change what differs in yours of that name",
        description="201 when the group is created (its endpoint_key is shown this once), 200 "
        "when it changed or was already so (changes is then []). A spec with any problem is a "
        "400 naming the field, and changes nothing.",
        request=SPEC_BODY,
        responses={201: s.GroupAppliedSerializer, 200: s.GroupAppliedSerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=SPEC_EXAMPLES,
    )
    @action(detail=False, methods=["post"], pagination_class=None)
    @idempotent(redact=_forget_key)
    def apply(self, request):
        source, fmt = _spec_source(request.data)
        applied = group_apply(user=account_of(request), source=source, fmt=fmt)
        group = self.get_queryset().get(pk=applied.group.pk)
        group.created = applied.created
        group.changes = applied.changes
        group.endpoint_key = applied.endpoint_key
        return Response(
            s.GroupAppliedSerializer(group, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED if applied.created else status.HTTP_200_OK,
        )

    @extend_schema(
        summary="Check a spec and price it, creating nothing",
        request=SPEC_BODY,
        responses={200: s.GroupQuoteSerializer},
        examples=SPEC_EXAMPLES,
    )
    @action(detail=False, methods=["post"], pagination_class=None)
    def quote(self, request):
        source, fmt = _spec_source(request.data)
        quote = group_quote(user=account_of(request), source=source, fmt=fmt)
        spec, plan = quote.spec, quote.plan
        body = {
            "name": spec.name,
            "exists": quote.exists,
            "image": quote.image.slug,
            "instance_type": plan.gpu_model.short_name,
            "port": spec.port,
            "spec": spec.as_dict(),
            "price": s.group_price(
                plan,
                min_replicas=spec.min_replicas,
                max_replicas=spec.max_replicas,
                warm_pool_size=spec.warm_pool_size,
            ),
        }
        return Response(s.GroupQuoteSerializer(body).data)

    @extend_schema(
        summary="The group's events (scaling decisions with their reasons), newest first",
        responses={200: s.GroupEventSerializer(many=True)},
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        group = self.get_object()
        page = self.paginate_queryset(group.events.order_by("-created_at", "-id"))
        return self.get_paginated_response(s.GroupEventSerializer(page, many=True).data)

    @extend_schema(
        summary="Rotate the group's endpoint key: a new key now, the old one for an overlap",
        description="The answer holds the new key, shown this once. The key it replaces "
        "keeps opening the endpoint until previous_key_until (overlap_s from now), then "
        "stops; rotating again during an overlap stops the older key at once.",
        request=s.EndpointKeyRotateSerializer,
        responses={200: s.EndpointKeyRotatedSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"], url_path="rotate-endpoint-key")
    @idempotent(redact=_forget_key)
    def rotate_endpoint_key(self, request, pk=None):
        form = s.EndpointKeyRotateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        rotated = group_endpoint_key_rotate(
            group=self.get_object(),
            actor=request.user,
            overlap=timedelta(seconds=form.validated_data["overlap_s"]),
        )
        body = {
            "endpoint_key": rotated.endpoint_key,
            "previous_key_until": rotated.previous_key_until,
        }
        return Response(s.EndpointKeyRotatedSerializer(body).data)

    @extend_schema(
        summary="Delete the group: its replicas terminate, then it is gone",
        description="202 while replicas are still terminating (status deleting), 200 once it "
        "is deleted.",
        request=None,
        responses={202: s.GroupDetailSerializer, 200: s.GroupDetailSerializer},
    )
    def destroy(self, request, pk=None):
        group = group_delete(group=self.get_object(), actor=request.user)
        fresh = self.get_queryset().get(pk=group.pk)
        done = fresh.status == Group.Status.DELETED
        return Response(
            s.GroupDetailSerializer(fresh, context=self.get_serializer_context()).data,
            status=status.HTTP_200_OK if done else status.HTTP_202_ACCEPTED,
        )
